"""The slurm suite (docs/cluster.md, "Slurm"), on a real Slurm this test starts (cluster.py):

  hetjob  deploy/slurm/stoker.sbatch as written, with a token and TLS files from the "shared"
          folder: a training that completes with a clean audit and exit code 0; `scancel JOB+1`
          (the producers' component) seen as producer_finished/producer_lost events and the
          job's exit code 3 (supply ended) passed through; `scancel JOB` stopping everything
          cleanly (the trainer saves and writes its summary, no process of the job left).
  scale   stoker-scale --engine slurm with deploy/slurm/producer.sbatch against a broker and a
          trainer of fixed demand: it grows the producer jobs from 0 to the wanted count, a
          restarted controller counts the jobs it finds and submits none, and with the trainer
          gone it cancels down to the minimum, the cancelled producers finishing cleanly; every
          change is a scaled event at the broker.

Run: python3 test_slurm.py hetjob|scale (meson sets the binaries' paths). Exit 77 (skip) with
the reason only where Slurm cannot run (not root, packages not installable)."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster import Cluster, Skip, free_port, wait_for  # noqa: E402

ROOT = os.environ.get("STOKER_SOURCE_ROOT",
                      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BINS = {name: os.environ.get(var, os.path.join("build", sub, name)) for name, var, sub in [
    ("stoker-broker", "STOKER_BROKER_BIN", "server"),
    ("stoker-producer", "STOKER_PRODUCER_BIN", "producer"),
    ("stoker-trainer", "STOKER_TRAINER_BIN", "trainer"),
    ("stoker-scale", "STOKER_SCALE_BIN", "scale")]}
HETJOB = os.path.join(ROOT, "deploy", "slurm", "stoker.sbatch")
PRODUCER_JOB = os.path.join(ROOT, "deploy", "slurm", "producer.sbatch")
T0 = time.monotonic()


def note(msg):
    print("[%5.1fs] %s" % (time.monotonic() - T0, msg), flush=True)


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok:   " + what.split("\n")[0][:200], flush=True)


def shared_folder(c):
    """The "shared file system": the binaries (one folder, STOKER_BIN), a token and TLS files."""
    shared = c.path("shared")
    os.makedirs(os.path.join(shared, "bin"))
    for name, path in BINS.items():
        os.symlink(os.path.abspath(path), os.path.join(shared, "bin", name))
    with open(os.path.join(shared, "token"), "w") as f:
        f.write(os.urandom(16).hex() + "\n")
    os.chmod(os.path.join(shared, "token"), 0o600)
    tls = os.path.join(shared, "tls")
    os.mkdir(tls)
    sh = ("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
          "-keyout ca.key -out ca.crt -days 2 -subj /CN=stoker-test-ca && "
          "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout broker.key "
          "-out broker.csr -subj /CN=%s && "
          "printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\\n' > broker.ext && "
          "openssl x509 -req -in broker.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
          "-extfile broker.ext -out broker.crt") % (c.host, c.host)
    r = subprocess.run(sh, shell=True, cwd=tls, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        raise AssertionError("openssl could not make the test's certificates: " + r.stdout)
    return shared


def read_json(path):
    with open(path) as f:
        return json.load(f)


def http_status(port, token):
    req = urllib.request.Request("http://127.0.0.1:%d/status" % port,
                                 headers={"Authorization": "Bearer " + token} if token else {})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read().decode())


def try_status(port, token=None):
    try:
        return http_status(port, token)
    except OSError:
        return None


def producers_alive(st):
    return [p for p in st.get("producers", []) if p.get("state", "alive") in ("alive", "connected")]


def processes_under(folder):
    """Pids whose command line names folder (the suite's binaries and job scripts run there)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if folder in cmd:
            out.append((int(pid), cmd))
    return out


def job_done(c, job):
    state, code = c.job_state(job)
    return (state, code) if state not in (None, "PENDING", "RUNNING", "CONFIGURING",
                                          "COMPLETING") else None


class HetJob:
    def __init__(self, c, shared, name, producers, trainer_args):
        self.c, self.out = c, os.path.join(shared, name)
        self.token = open(os.path.join(shared, "token")).read().strip()
        self.port, self.metrics = free_port(), free_port()
        env = dict(c.env, STOKER_BIN=os.path.join(shared, "bin"), STOKER_PORT=str(self.port),
                   STOKER_METRICS_PORT=str(self.metrics), STOKER_PRODUCERS=str(producers),
                   STOKER_TOKEN_FILE=os.path.join(shared, "token"),
                   STOKER_TLS_CERT=os.path.join(shared, "tls", "broker.crt"),
                   STOKER_TLS_KEY=os.path.join(shared, "tls", "broker.key"),
                   STOKER_TLS_CA=os.path.join(shared, "tls", "ca.crt"),
                   STOKER_OUT=self.out, STOKER_PRODUCER_ARGS="--delay 0.005:0.01",
                   STOKER_TRAINER_ARGS="--device cpu " + trainer_args)
        r = subprocess.run(["sbatch", "--parsable", "--chdir", shared, "--output",
                            os.path.join(shared, name + "-%j.out"), HETJOB], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        if r.returncode != 0:
            raise AssertionError("sbatch %s exited %d: %s" % (HETJOB, r.returncode, r.stderr))
        self.job = r.stdout.strip().split(";")[0]
        self.log = os.path.join(shared, "%s-%s.out" % (name, self.job))
        note("submitted %s as job %s" % (name, self.job))

    def status(self):
        return try_status(self.metrics, self.token)

    def wait_end(self, limit_s):
        try:
            return wait_for("job %s ends" % self.job, lambda: job_done(self.c, self.job), limit_s)
        except AssertionError:
            raise AssertionError("job %s did not end within %.0f s; its output:\n%s\n%s" % (
                self.job, limit_s, self.output(), self.c.logs()))

    def output(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return "(no output file %s)" % self.log

    def summary(self):
        return read_json(os.path.join(self.out, "summary.json"))

    def wait_training(self, producers):
        """Until the broker lists `producers` producers and the trainer has taken examples."""
        def ready():
            st = self.status()
            return st if st and len(producers_alive(st)) == producers and \
                st["counters"]["acknowledged"] > 0 else None
        try:
            return wait_for("job %s trains with %d producers" % (self.job, producers), ready, 60,
                            0.5)
        except AssertionError as e:
            raise AssertionError("%s; last /status %s\noutput:\n%s" % (e, self.status(),
                                                                        self.output()))


def clean_audit(s):
    a = s["audit"]
    return a["discrepancy"] == 0 and a["duplicates_seen"] == 0


def scenario_hetjob(c):
    shared = shared_folder(c)
    # 1. A training that completes: 3 producers on the CPU partition, the trainer on "gpu".
    j = HetJob(c, shared, "complete", 3, "--rounds 10 --round-length 40 --stall-timeout 30")
    state, code = j.wait_end(120)
    out = j.output()
    check(state == "COMPLETED" and code == "0:0",
          "the completed job's state and exit code: %s %s\n%s" % (state, code, out))
    s = j.summary()
    check(s["status"] == "completed" and s["examples"] == 400 and s["device"] == "cpu",
          "training completed on the 'gpu' component: %s" % {k: s[k] for k in (
              "status", "examples", "device", "reason")})
    check(clean_audit(s), "clean audit: %s" % s["audit"])
    check("tls+tcp://" in out and "on gpu1" in out,
          "the broker listens with TLS on component 0's node: %s" % out.splitlines()[:2])
    names = sorted(os.path.basename(p) for p in os.listdir(j.out) if p.startswith("producer-"))
    check(names == ["producer-0.log", "producer-1.log", "producer-2.log"],
          "three producers ran under srun in component 1: %s" % names)

    # 2. scancel of the producers' component: the supply ends, the job says so (exit 3).
    j = HetJob(c, shared, "lose", 2, "--time-goal 300 --stall-timeout 60")
    st = j.wait_training(2)
    nodes = sorted({p["name"].rsplit("-", 1)[0] for p in producers_alive(st)})
    check(all(n.startswith("cpu") for n in nodes),
          "producers run on the CPU partition's nodes: %s" % nodes)
    c.run("scancel", j.job + "+1")
    note("cancelled component 1 of job %s (the producers)" % j.job)
    state, code = j.wait_end(90)
    out = j.output()
    check(code == "3:0", "the job's exit code is the trainer's 3 (supply ended): %s %s\n%s"
          % (state, code, out))
    s = j.summary()
    kinds = [e["kind"] for e in s["events"]]
    ends = [e for e in s["events"] if e["kind"] in ("producer_finished", "producer_lost")]
    check(s["status"] == "supply_ended", "trainer status supply_ended: %s" % s["reason"])
    check(len({e["producer"] for e in ends}) == 2,
          "both producers' ends reached the trainer as events: %s" % kinds)
    check(clean_audit(s), "clean audit after the producers were cancelled: %s" % s["audit"])

    # 3. scancel of the whole job: the trainer saves and says so, nothing of the job is left.
    j = HetJob(c, shared, "cancel", 2, "--time-goal 300 --stall-timeout 60")
    j.wait_training(2)
    t = time.monotonic()
    c.run("scancel", j.job)
    note("cancelled job %s" % j.job)
    state, code = j.wait_end(60)
    gone = wait_for("the job's processes end", lambda: not processes_under(shared) or None, 30)
    check(state == "CANCELLED", "job state %s after scancel" % state)
    check(gone, "no process of the job left %.1f s after scancel" % (time.monotonic() - t))
    s = j.summary()
    # scancel signals every process of the job at once: the trainer's own SIGTERM
    # (interrupted) or the producers' goodbyes (supply_ended) may reach it first, and the
    # broker may be gone before the trainer asks it for the audit (then null); either way it
    # stops and writes its summary, and an audit it got is clean.
    check(s["status"] in ("interrupted", "supply_ended")
          and (s["audit"] is None or clean_audit(s)),
          "the trainer stopped (%s), audit %s" % (s["status"], s["audit"]))
    check(os.path.getsize(os.path.join(j.out, "weights.safetensors")) > 0,
          "the trainer saved its weights before stopping")
    check("stop requested" in j.output(), "the job script saw the stop:\n" + j.output())


def squeue_jobs(c, name):
    out = c.run("squeue", "--noheader", "--name", name, "--format=%i %T")
    return [tuple(l.split()) for l in out.splitlines() if l.strip()]


TRAINER = r"""
import sys, time
import stoker
url, rate, batch = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
with stoker.Client(url, batch_size=batch, stall_timeout=120) as c:
    t = time.monotonic()
    while True:
        with c.next_batch():
            pass
        t += batch / rate
        if t > time.monotonic():
            time.sleep(t - time.monotonic())
"""


def scenario_scale(c):
    shared = shared_folder(c)
    procs = []
    try:
        port, metrics = free_port(), free_port()
        url = "tcp://127.0.0.1:%d" % port  # the nodes are this host
        procs.append(subprocess.Popen([BINS["stoker-broker"], "--listen", "tcp://0.0.0.0:%d" % port,
                                       "--metrics", "http://127.0.0.1:%d" % metrics,
                                       "--log-level", "warn"], stdout=subprocess.DEVNULL))
        wait_for("the broker answers", lambda: try_status(metrics), 10)
        # Demand fixed at 150 examples/s; a producer makes 50/s (--delay 0.02): wanted =
        # ceil(150 x 1.2 / 50) = 4, the controller's --max.
        trainer_env = dict(os.environ)
        if os.environ.get("STOKER_ASAN_PRELOAD"):  # a sanitizer build's libstoker.so
            trainer_env.update(LD_PRELOAD=os.environ["STOKER_ASAN_PRELOAD"],
                               ASAN_OPTIONS="detect_leaks=0:abort_on_error=1")
        trainer = subprocess.Popen([sys.executable, "-c", TRAINER, url, "150", "10"],
                                   env=trainer_env)
        procs.append(trainer)
        env = dict(c.env, STOKER_BIN=os.path.join(shared, "bin"),
                   STOKER_PRODUCER_ARGS="--delay 0.02 --log-level warn")
        scale_args = [BINS["stoker-scale"], "--broker", url, "--engine", "slurm",
                      "--slurm-template", PRODUCER_JOB, "--slurm-partition", "cpu",
                      "--interval", "0.5", "--cooldown", "3", "--max-step", "2", "--min", "1",
                      "--max", "4", "--idle", "4"]
        log1 = open(os.path.join(shared, "scale-1.log"), "w")
        scale = subprocess.Popen(scale_args, env=env, cwd=shared, stdout=log1,
                                 stderr=subprocess.STDOUT)
        procs.append(scale)
        name = "stoker-producer-default"

        def grown():
            jobs = squeue_jobs(c, name)
            st = try_status(metrics)
            alive = len(producers_alive(st)) if st else 0
            return (jobs, alive) if len(jobs) == 4 and alive == 4 and all(
                s == "RUNNING" for _, s in jobs) else None
        try:
            jobs, alive = wait_for("the controller grows the producers to 4", grown, 90, 0.5)
        except AssertionError as e:
            raise AssertionError("%s: squeue %s\ncontroller:\n%s" % (
                e, squeue_jobs(c, name), open(log1.name).read()))
        text = open(log1.name).read()
        steps = [l for l in text.splitlines() if l.startswith("scale: pool 'default'")]
        submitted = [l for l in text.splitlines() if "submitted job" in l]
        note("grown: %s" % steps)
        check(len(submitted) == 4 and steps[0].startswith("scale: pool 'default' from 0 to 1"),
              "4 producer jobs submitted, starting from none: %s" % steps)
        counts = [(int(l.split(" from ")[1].split()[0]), int(l.split(" to ")[1].split(":")[0]))
                  for l in steps]
        check(counts[-1][1] == 4 and all(0 < b - a <= 2 for a, b in counts),
              "grown in steps of at most --max-step 2 to --max 4: %s" % counts)
        st = http_status(metrics, None)
        pool = {p["pool"]: p for p in st["autoscale"]["pools"]}["default"]
        check(pool["current"] == 4 and pool["wanted"] >= 3,
              "the broker sees 4 producers, wants %d: %s" % (pool["wanted"], pool["why"]))

        # A restarted controller counts the jobs it finds and submits none.
        scale.send_signal(signal.SIGTERM)
        check(scale.wait(10) == 0, "the controller stops on SIGTERM with 0")
        log2 = open(os.path.join(shared, "scale-2.log"), "w")
        scale = subprocess.Popen(scale_args, env=env, cwd=shared, stdout=log2,
                                 stderr=subprocess.STDOUT)
        procs.append(scale)
        time.sleep(4)
        check(len(squeue_jobs(c, name)) == 4 and "submitted" not in open(log2.name).read()
              and "cancelled" not in open(log2.name).read(),
              "a restarted controller keeps the 4 jobs it finds: %r" % open(log2.name).read())

        # No trainer for --idle: down to the minimum, newest jobs cancelled, producers finish.
        trainer.kill()
        trainer.wait()
        note("trainer stopped")

        def shrunk():
            jobs = squeue_jobs(c, name)
            st = try_status(metrics)
            return (jobs, st) if len(jobs) == 1 and st and len(producers_alive(st)) == 1 \
                else None
        try:
            jobs, st = wait_for("the controller shrinks the producers to 1", shrunk, 60, 0.5)
        except AssertionError as e:
            raise AssertionError("%s: squeue %s\ncontroller:\n%s" % (
                e, squeue_jobs(c, name), open(log2.name).read()))
        text = open(log2.name).read()
        steps = [l for l in text.splitlines() if l.startswith("scale: pool 'default'")]
        note("shrunk: %s" % steps)
        check(len(steps) == 2 and "from 4 to 2" in steps[0] and "from 2 to 1" in steps[1]
              and "no trainer pulled" in steps[1], "down 4 -> 2 -> 1 when idle: %s" % steps)
        first = sorted(int(l.split("submitted job ")[1].split()[0]) for l in submitted)[0]
        check(jobs == [(str(first), "RUNNING")],
              "the oldest job stays, the newer ones are cancelled: %s" % jobs)
        cancelled = [l for l in text.splitlines() if "cancelled job" in l]
        check(len(cancelled) == 2, "each cancel logged: %s" % cancelled)
        finished = [e for e in st.get("events", []) if e.get("kind") == "producer_finished"]
        check(len(finished) == 3, "the 3 cancelled producers said goodbye (producer_finished): %s"
              % [e.get("kind") for e in st.get("events", [])])
        # Each change reached the broker as a scaled event, naming the engine.
        scaled = [e for e in http_status(metrics, None)["events"] if e["kind"] == "scaled"]
        check([(e["from"], e["to"]) for e in scaled] == counts + [(4, 2), (2, 1)]
              and all("(slurm)" in e["reason"] for e in scaled),
              "every change is a scaled event at the broker: %s"
              % [(e["from"], e["to"], e["reason"][:40]) for e in scaled])
        scale.send_signal(signal.SIGTERM)
        scale.wait(10)
    finally:
        # The producer jobs first, while their broker still answers their goodbyes.
        for p in procs[2:]:
            if p.poll() is None:
                p.kill()
        subprocess.run(["scancel", "--name", "stoker-producer-default"], env=c.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        try:
            wait_for("the producer jobs end", lambda: not squeue_jobs(c, "stoker-producer-default")
                     or None, 20)
        except AssertionError as e:
            print("cleanup: %s" % e)
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def main():
    scenario = sys.argv[1] if len(sys.argv) > 1 else ""
    run = {"hetjob": scenario_hetjob, "scale": scenario_scale}.get(scenario)
    if run is None:
        print("usage: test_slurm.py hetjob|scale", file=sys.stderr)
        return 2
    # meson's timeout sends SIGTERM: end through the finally blocks, which stop the daemons.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    try:
        c = Cluster()
    except Skip as e:
        print("SKIP: %s" % e)
        return 77
    folder = c.dir
    note("Slurm up in %s: %s" % (folder, c.run("sinfo", "-h", "-o", "%P %D %N").split("\n")))
    try:
        run(c)
    except AssertionError as e:
        print("FAIL: %s" % e)
        print(c.logs())
        return 1
    finally:
        c.close()
        left = processes_under(folder)
        if left:
            print("FAIL: processes left after cleanup: %s" % left)
            for pid, _ in left:
                os.kill(pid, signal.SIGKILL)
            return 1
        note("Slurm stopped, %s removed" % folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
