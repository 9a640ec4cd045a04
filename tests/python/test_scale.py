"""stoker-scale (docs/autoscale.md) against a real broker, a slow producer and a fast
trainer: with the exec engine it scales the pool up in steps of at most --max-step, no sooner
than --cooldown apart and never past --max; with the trainer gone for --idle it scales down to
the minimum; the broker killed and started again on its address, it holds the pool (the new
broker's "no trainer has pulled yet" is not the trainer gone) and says so (`broker-restarted`);
--dry-run prints its decisions and runs nothing; a consumer mixing a fast and a 5x slower pool
1:1 waits a third of its time until the controller grows the slow pool, then under 2 %. The exec command here only records
the counts it is given (environment and last argument), except where producers are killed: there
it starts producers up to its count, and the ones the user SIGKILLs come back."""

import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_autoscale import Broker  # noqa: E402
from helpers import BROKER, PRODUCER, metrics_url, run  # noqa: E402

SCALE = os.environ.get("STOKER_SCALE_BIN", "build/scale/stoker-scale")


def recorder(d):
    path = os.path.join(d, "record.sh")
    with open(path, "w") as f:
        f.write('#!/bin/sh\necho "$(date +%%s.%%N) $STOKER_POOL $STOKER_WANTED $1" >> %s\n'
                % os.path.join(d, "counts"))
    os.chmod(path, 0o755)
    return path, os.path.join(d, "counts")


def records(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            at, pool, env_count, arg_count = line.split()
            assert env_count == arg_count, line  # the same count both ways
            out.append((float(at), pool, int(arg_count)))
    return out


def test_scales_up_then_down_when_idle():
    with Broker("--autoscale-max", "64") as b:
        script, counts = recorder(b.dir)
        b.producer("slow", "--delay", "0.02", "--pool", "aug")
        trainer = b.trainer(1000, 20)
        scale = subprocess.Popen([SCALE, "--broker", b.url, "--exec-cmd", script, "--interval",
                                  "0.3", "--cooldown", "2", "--max-step", "2", "--max", "5",
                                  "--idle", "2"], stdout=subprocess.PIPE, text=True)
        b.procs.append(scale)
        deadline = time.monotonic() + 30
        while [c for _, _, c in records(counts)][-1:] != [5] and time.monotonic() < deadline:
            time.sleep(0.2)
        up = records(counts)
        # 1 -> ... -> 5: up only, steps of at most 2, capped at --max, the cool-down between.
        steps = [1] + [c for _, _, c in up]
        assert steps[-1] == 5 and all(0 < b - a <= 2 for a, b in zip(steps, steps[1:])), up
        assert all(p == "aug" for _, p, _ in up), up
        assert all(b[0] - a[0] >= 1.9 for a, b in zip(up, up[1:])), up
        trainer.send_signal(signal.SIGKILL)
        trainer.wait()
        deadline = time.monotonic() + 30
        while [c for _, _, c in records(counts)][-1:] != [1] and time.monotonic() < deadline:
            time.sleep(0.2)
        down = [5] + [c for _, _, c in records(counts)][len(up):]
        assert down == [5, 3, 1], records(counts)  # to the minimum, in steps of 2
        scale.send_signal(signal.SIGTERM)
        out, _ = scale.communicate(timeout=10)
        lines = [l for l in out.splitlines() if l.startswith("scale: pool 'aug'")]
        assert len(lines) == len(up) + 2, out  # one line per decision
        assert "from 1 to " in lines[0] and "trainers would take" in lines[0], lines
        assert "from 3 to 1" in lines[-1] and "no trainer pulled" in lines[-1], lines
        assert scale.returncode == 0, scale.returncode


def status_when(b, ok, within_s):
    """The broker's /status once ok(status) holds, read every 0.5 s (a read that times out on a
    loaded machine is read again); the last one read after within_s."""
    deadline, st = time.monotonic() + within_s, None
    while True:
        try:
            st = json.loads(b.get("/status"))
        except OSError:
            pass
        if (st is not None and ok(st)) or time.monotonic() > deadline:
            return st
        time.sleep(0.5)


def test_restarted_broker_holds_the_pool():
    with Broker("--autoscale-max", "64") as b:
        script, counts = recorder(b.dir)
        b.producer("slow", "--delay", "0.02")
        trainer = b.trainer(1000, 20)
        scale = subprocess.Popen([SCALE, "--broker", b.url, "--exec-cmd", script, "--interval",
                                  "0.3", "--cooldown", "0", "--max-step", "2", "--max", "3",
                                  "--idle", "600"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        b.procs.append(scale)
        deadline = time.monotonic() + 30
        while [c for _, _, c in records(counts)][-1:] != [3] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [c for _, _, c in records(counts)][-1:] == [3], records(counts)
        up = len(records(counts))
        # SIGKILL, away for 2 s (the controller reads nothing), then a new broker on the same
        # address: its queues and counters empty, no trainer pulled yet. The trainer is stopped
        # meanwhile and for 3 s more, so the controller reads the new broker before the trainer
        # is back (a trainer slower to reconnect than the controller, as over a network).
        trainer.send_signal(signal.SIGSTOP)
        b.broker.kill()
        b.broker.wait()
        time.sleep(2)
        b.broker = subprocess.Popen([BROKER, "--listen", b.url, "--metrics", "http://127.0.0.1:0",
                                     "--log-level", "error", "--autoscale-max", "64"],
                                    stdout=subprocess.PIPE)
        b.http = metrics_url(b.broker)
        time.sleep(3)
        st = status_when(b, lambda st: True, 20)
        assert st is not None and st["autoscale"]["idle_s"] is None, st
        trainer.send_signal(signal.SIGCONT)
        # The producer and the trainer come back; whatever the new broker says meanwhile, the
        # pool stays at 3 (the trainer still wants more than --max), for 5 s after both are.
        st = status_when(b, lambda st: st["producers_alive"] == 1
                         and st["autoscale"]["idle_s"] is not None, 30)
        assert st["producers_alive"] == 1 and st["autoscale"]["idle_s"] is not None, st
        time.sleep(5)
        assert records(counts)[up:] == [], records(counts)
        scale.send_signal(signal.SIGTERM)
        out, err = scale.communicate(timeout=10)
        assert "no trainer has pulled yet" not in out, out
        assert "broker-restarted: " in err and "the pools hold" in err, err


def test_dry_run_acts_on_nothing():
    with Broker() as b:
        script, counts = recorder(b.dir)
        b.producer("slow", "--delay", "0.02")
        b.trainer(1000, 20)
        time.sleep(4)
        r = subprocess.run([SCALE, "--broker", b.url, "--exec-cmd", script, "--dry-run",
                            "--rounds", "3", "--interval", "0.3", "--cooldown", "0"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert "(dry run)" in r.stdout and "pool 'default' from 1 to " in r.stdout, r.stdout
        assert records(counts) == [], records(counts)


def starter(d, url, delays=None):
    """An exec command as a user writes one: starts producers in the background up to its count
    (those it started and still alive counted by their pid files) and leaves them running. With
    delays ({pool: seconds}), producers of pool $STOKER_POOL with that pool's --delay, counted per
    pool; else of the default pool with --delay 0.01, each run noted in the file runs."""
    path = os.path.join(d, "start.sh" if delays is None else "start-pool.sh")
    pool = "" if delays is None else "$STOKER_POOL."
    with open(path, "w") as f:
        f.write("""#!/bin/sh
%(cases)s
n=0
for f in %(d)s/pid.%(pool)s*; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    if [ -r /proc/$pid/status ] && ! grep -q '^State:[[:space:]]*Z' /proc/$pid/status; then
        n=$((n + 1))
    else
        rm -f "$f"
    fi
done
while [ $n -lt $1 ]; do
    i=$(date +%%s%%N)
    %(producer)s --broker %(url)s %(args)s --log-level error </dev/null >/dev/null 2>&1 &
    echo $! > %(d)s/pid.%(pool)s$i
    n=$((n + 1))
done
%(note)s
""" % {"d": d, "producer": os.path.abspath(PRODUCER), "url": url, "pool": pool,
       "cases": "" if delays is None else 'case "$STOKER_POOL" in\n%s\n*) echo "no such pool: '
                '$STOKER_POOL" >&2; exit 1;;\nesac' % "\n".join(
                    "%s) delay=%s;;" % (p, x) for p, x in delays.items()),
       "args": '--name "p-$i" --delay 0.01' if delays is None else
               '--pool "$STOKER_POOL" --name "$STOKER_POOL-$i" --delay "$delay:$delay"',
       "note": 'echo "$(date +%%s.%%N) $1" >> %s/runs' % d if delays is None else ""})
    os.chmod(path, 0o755)
    return path


def started(d):
    pids = []
    for name in sorted(os.listdir(d)):
        if name.startswith("pid."):
            with open(os.path.join(d, name)) as f:
                pids.append(int(f.read()))
    return pids


def alive(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return not any(l.startswith("State:") and "Z" in l.split()[1] for l in f)
    except OSError:
        return False


def test_killed_producers_are_replaced():
    # The broker wants 3 (its minimum, no trainer yet); the exec command starts them. Two
    # SIGKILLed by the user are started again within a bound, and the controller says so.
    # Before, it counted the 3 it had asked for and left the pool at 1 for good.
    with Broker("--autoscale-min", "3") as b:
        script = starter(b.dir, b.url)
        try:
            subprocess.run([script, "1"], check=True, timeout=10)
            st = status_when(b, lambda st: st["producers_alive"] == 1, 20)
            assert st["producers_alive"] == 1, st
            scale = subprocess.Popen([SCALE, "--broker", b.url, "--exec-cmd", script,
                                      "--interval", "0.3", "--cooldown", "0", "--idle", "600"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            b.procs.append(scale)
            st = status_when(b, lambda st: st["producers_alive"] == 3, 20)
            assert st["producers_alive"] == 3, st
            first = [p for p in started(b.dir) if alive(p)]
            assert len(first) == 3, first
            # The controller replaces what it saw alive (not what died before its next reading,
            # as a producer that cannot start would): let a few of its readings see the three.
            time.sleep(1.5)
            # The two the controller's command started: left running by it, they are the
            # controller's children (it reaps them and says so).
            killed = first[1:]
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
            t0 = time.monotonic()
            # Dead (or a zombie) and gone from the broker's count before they can come back.
            st = status_when(b, lambda st: st["producers_alive"] == 1
                             and not any(alive(p) for p in killed), 20)
            assert st["producers_alive"] == 1, st
            st = status_when(b, lambda st: st["producers_alive"] == 3
                             and len([p for p in started(b.dir) if alive(p)]) == 3, 20)
            took = time.monotonic() - t0
            now = [p for p in started(b.dir) if alive(p)]
            assert st["producers_alive"] == 3 and len(now) == 3, (st, now)
            assert not set(now) & set(killed), (now, first)
            print("replaced in %.1f s" % took)
            assert took < 15, took
            scale.send_signal(signal.SIGTERM)
            out, err = scale.communicate(timeout=10)
            assert "scale: pool 'default' replaces 2 of 3" in out, out
            assert "producers-missing: pool 'default': 2 of the 3 asked for" in err, err
            for pid in killed:
                assert "child-ended: pid %d, left running by --exec-cmd, killed by signal 9" % pid \
                    in err, err
        finally:
            for pid in started(b.dir):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


# A trainer of a 1:1 mixture of pools fast and slow whose steps take BATCH / RATE seconds (a
# GPU's, slept), in batches of BATCH: it prints every second the share of that second it spent
# waiting for a batch (JSON: {"t": monotonic, "wait": fraction}).
MIX_TRAINER = r"""
import json, sys, time
import stoker
url, rate, batch = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
with stoker.Client(url, batch_size=batch, stall_timeout=60, mix={"fast": 1, "slow": 1}) as c:
    window = time.monotonic()
    waited = 0.0
    while True:
        t0 = time.monotonic()
        with c.next_batch():
            waited += time.monotonic() - t0
            time.sleep(batch / rate)
        now = time.monotonic()
        if now - window >= 1.0:
            print(json.dumps({"t": now, "wait": waited / (now - window)}), flush=True)
            window, waited = now, 0.0
"""


def test_a_mixture_waiting_on_a_slow_pool_is_fed_once_the_controller_grows_it():
    # A consumer mixing a fast pool and a 5x slower one 1:1 at 600 examples/s: one producer of
    # each gives the slow pool's half only 200 of the 300 it needs, so the consumer waits about a
    # third of its time. The broker's signal puts half the demand on each pool and stoker-scale
    # (exec engine) grows the slow one; the consumer's wait then falls under 2 %.
    with Broker("--autoscale-max", "8") as b:
        script = starter(b.dir, b.url, {"fast": 0.001, "slow": 0.005})
        try:
            for pool in ("fast", "slow"):
                subprocess.run([script, "1"], check=True, timeout=10,
                               env=dict(os.environ, STOKER_POOL=pool))
            st = status_when(b, lambda st: st["producers_alive"] == 2, 20)
            assert st["producers_alive"] == 2, st
            trainer = subprocess.Popen([sys.executable, "-c", MIX_TRAINER, b.url, "600", "20"],
                                       stdout=subprocess.PIPE, text=True)
            b.procs.append(trainer)
            waits = []

            def read(seconds):
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    line = trainer.stdout.readline()
                    if not line:
                        raise AssertionError("the trainer ended: %r" % trainer.wait())
                    waits.append(json.loads(line))

            read(6)
            starved = statistics.median(w["wait"] for w in waits[-4:])
            scale = subprocess.Popen([SCALE, "--broker", b.url, "--exec-cmd", script,
                                      "--interval", "0.3", "--cooldown", "1", "--max-step", "4",
                                      "--max", "8", "--idle", "600"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            b.procs.append(scale)
            grown = time.monotonic() + 40
            while time.monotonic() < grown:
                read(1)
                slow = b.pools().get("slow", {})
                if slow.get("current", 0) >= 2 and slow.get("current", 0) >= slow.get("wanted", 99):
                    break
            pools = b.pools()
            read(4)  # the new producers' first pushes, the queues refilled
            n = len(waits)
            read(8)
            fed = statistics.mean(w["wait"] for w in waits[n:])
            print("wait: %.3f with one slow producer, %.3f after scaling; pools %s"
                  % (starved, fed, {p: (v.get("current"), v["wanted"]) for p, v in pools.items()}))
            assert starved > 0.15, (starved, waits)  # the setting does starve it
            assert pools["slow"]["wanted"] >= 2 and pools["slow"]["current"] >= 2, pools
            assert fed < 0.02, (fed, waits[n:], pools)
            scale.send_signal(signal.SIGTERM)
            out, _ = scale.communicate(timeout=10)
            assert "scale: pool 'slow'" in out, out
        finally:
            for name in os.listdir(b.dir):
                if name.startswith("pid."):
                    with open(os.path.join(b.dir, name)) as f:
                        try:
                            os.kill(int(f.read()), signal.SIGKILL)
                        except (ProcessLookupError, ValueError):
                            pass


def test_usage_errors_exit_2():
    for args, says in [([], "--exec-cmd"), (["--dry-run", "--min", "5", "--max", "2"], "--min"),
                       (["--dry-run", "--engine", "kubernetes"], "--engine"),
                       (["--engine", "swarm", "--pool", "aug"], "--service"),
                       (["--dry-run", "--broker", "localhost:1"], "tcp://")]:
        argv = [SCALE, "--broker", "ipc:///nonexistent/b"] + args
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        assert r.returncode == 2 and says in r.stderr, (args, r.returncode, r.stderr)


run(globals())
