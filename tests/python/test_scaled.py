"""`scaled` events: every change stoker-scale acts on is told to the broker, which logs
it (`scaled: pool ...`), lists it in /status's events (pool, from, to, why) and hands it to the
trainers with their batches. A dry run tells nothing. stoker-scale reaches a broker that asks
for TLS with client certificates and a token (--tls-ca/--tls-cert/--tls-key, --token-file) and
reports there too; without them it gets no signal and acts on nothing."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from helpers import BROKER, PRODUCER, SKIP, run  # noqa: E402
from test_autoscale import Broker  # noqa: E402
from test_scale import SCALE, recorder, records  # noqa: E402

# A trainer of RATE examples/s writing every event it is handed, one JSON line each, to a file.
TRAINER = r"""
import json, sys, time
import stoker
url, rate, batch, path = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
kw = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
out = open(path, "a")
def on_event(e):
    out.write(json.dumps(e._asdict()) + "\n")
    out.flush()
with stoker.Client(url, batch_size=batch, stall_timeout=60, on_event=on_event, **kw) as c:
    t = time.monotonic()
    while True:
        with c.next_batch():
            pass
        t += batch / rate
        if t > time.monotonic():
            time.sleep(t - time.monotonic())
"""


def trainer(procs, url, rate, batch, path, **kw):
    p = subprocess.Popen([sys.executable, "-c", TRAINER, url, str(rate), str(batch), path,
                          json.dumps(kw)])
    procs.append(p)
    return p


def lines_of(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def wait_for(what, cond, limit_s):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("not within %.0f s: %s" % (limit_s, what))


def test_scaled_in_status_trainer_events_and_log():
    with Broker("--autoscale-max", "64") as b:
        script, counts = recorder(b.dir)
        events = os.path.join(b.dir, "events")
        b.producer("slow", "--delay", "0.02", "--pool", "aug")
        trainer(b.procs, b.url, 1000, 20, events)
        time.sleep(3)
        dry = subprocess.run([SCALE, "--broker", b.url, "--exec-cmd", script, "--dry-run",
                              "--rounds", "3", "--interval", "0.3", "--cooldown", "0"],
                             capture_output=True, text=True, timeout=30)
        assert dry.returncode == 0 and "(dry run)" in dry.stdout, (dry.stdout, dry.stderr)
        st = json.loads(b.get("/status"))
        assert not [e for e in st["events"] if e["kind"] == "scaled"], st["events"]
        scale = subprocess.Popen([SCALE, "--broker", b.url, "--exec-cmd", script, "--interval",
                                  "0.3", "--cooldown", "1", "--max-step", "2", "--max", "3"],
                                 stdout=subprocess.PIPE, text=True)
        b.procs.append(scale)
        wait_for("stoker-scale runs 1 -> 3", lambda: [c for _, _, c in records(counts)][-1:] == [3],
                 30)
        steps = [1] + [c for _, _, c in records(counts)]

        def scaled_in_status():
            st = json.loads(b.get("/status"))
            return [e for e in st["events"] if e["kind"] == "scaled"] or None
        got = wait_for("scaled events in /status", lambda: (
            lambda s: s if s and len(s) == len(steps) - 1 else None)(scaled_in_status()), 10)
        # One event per change, in order: the pool as its name, from and to, why and the engine.
        assert [(e["from"], e["to"]) for e in got] == list(zip(steps, steps[1:])), (got, steps)
        for e in got:
            assert e["name"] == "aug" and e["producer"] == 0, e
            assert e["reason"].startswith("from %d to %d (exec): broker: " % (e["from"], e["to"])), e
            assert "trainers would take" in e["reason"], e
        # The trainer was handed them with its batches.
        seen = wait_for("the trainer's scaled events", lambda: (
            lambda s: s if len(s) == len(got) else None)(
                [e for e in lines_of(events) if e["kind"] == "scaled"]), 10)
        assert [e["name"] for e in seen] == ["aug"] * len(got), seen
        assert [e["reason"] for e in seen] == [e["reason"] for e in got], (seen, got)


def test_scaled_logged_by_the_broker():
    # A broker logging at info: the `scaled` line names pool, from, to, engine and why.
    d = tempfile.mkdtemp(prefix="stoker-scaled-")
    url = "ipc://" + os.path.join(d, "broker.ipc")
    procs = []
    try:
        with open(os.path.join(d, "broker.log"), "w") as log:
            procs.append(subprocess.Popen([BROKER, "--listen", url, "--log-level", "info"],
                                          stdout=subprocess.DEVNULL, stderr=log))
        script, counts = recorder(d)
        procs.append(subprocess.Popen([PRODUCER, "--broker", url, "--delay", "0.02", "--pool",
                                       "aug", "--log-level", "error"]))
        trainer(procs, url, 1000, 20, os.path.join(d, "events"))
        procs.append(subprocess.Popen([SCALE, "--broker", url, "--exec-cmd", script, "--interval",
                                       "0.3", "--cooldown", "1", "--max", "2"],
                                      stdout=subprocess.DEVNULL))
        wait_for("a change", lambda: records(counts), 30)

        def logged():
            with open(os.path.join(d, "broker.log")) as f:
                t = f.read()
            return t if "scaled: pool 'aug' from 1 to 2 by exec: broker: " in t else None
        text = wait_for("the broker's scaled line", logged, 10)
        assert "trainers would take" in text, text
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


def test_tls_and_token():
    if shutil.which("openssl") is None:
        print("SKIP: openssl is not installed (scripts/deps.sh installs it)")
        sys.exit(SKIP)
    from test_tls import make_ca, make_cert
    d = tempfile.mkdtemp(prefix="stoker-scaled-tls-")
    procs = []
    try:
        make_ca(d, "ca")
        make_cert(d, "ca", "server", "localhost")
        make_cert(d, "ca", "client", "stoker-client")
        f = lambda name: os.path.join(d, name)  # noqa: E731
        with open(f("token"), "w") as t:
            t.write("s3cret-scaled-token\n")
        broker = subprocess.Popen(
            [BROKER, "--listen", "tls+tcp://127.0.0.1:0", "--tls-cert", f("server.crt"),
             "--tls-key", f("server.key"), "--tls-ca", f("ca.crt"), "--token-file", f("token"),
             "--metrics", "http://127.0.0.1:0", "--log-level", "error"], stdout=subprocess.PIPE)
        procs.append(broker)
        url = http = None
        deadline = time.monotonic() + 10
        while (url is None or http is None) and time.monotonic() < deadline:
            line = broker.stdout.readline().decode()
            if line.startswith("listening "):
                url = line.split()[1]
            if line.startswith("metrics "):
                http = line.split()[1]
        assert url and http, (url, http)
        tls = ["--tls-ca", f("ca.crt"), "--tls-cert", f("client.crt"), "--tls-key", f("client.key")]
        procs.append(subprocess.Popen([PRODUCER, "--broker", url, "--token-file", f("token"),
                                       "--delay", "0.02", "--pool", "aug", "--log-level",
                                       "error"] + tls))
        trainer(procs, url, 1000, 20, f("events"), token_file=f("token"), tls_ca=f("ca.crt"),
                tls_cert=f("client.crt"), tls_key=f("client.key"))
        script, counts = recorder(d)
        # Without the TLS options: refused by the command line (a tls+tcp:// URL needs --tls-ca).
        r = subprocess.run([SCALE, "--broker", url, "--exec-cmd", script, "--rounds", "1"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and "--tls-ca" in r.stderr, (r.returncode, r.stderr)
        # Without the token: no signal, nothing done.
        r = subprocess.run([SCALE, "--broker", url, "--exec-cmd", script, "--rounds", "2",
                            "--interval", "0.3", "--cooldown", "0"] + tls,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0 and "no signal" in r.stderr and records(counts) == [], r.stderr
        scale = subprocess.Popen([SCALE, "--broker", url, "--token-file", f("token"), "--exec-cmd",
                                  script, "--interval", "0.3", "--cooldown", "1", "--max", "2"]
                                 + tls, stdout=subprocess.DEVNULL)
        procs.append(scale)
        wait_for("a change over TLS", lambda: records(counts), 30)
        import urllib.request

        def scaled():
            req = urllib.request.Request(http + "/status", headers={
                "Authorization": "Bearer s3cret-scaled-token"})
            with urllib.request.urlopen(req, timeout=5) as resp:
                st = json.loads(resp.read().decode())
            return [e for e in st["events"] if e["kind"] == "scaled"] or None
        got = wait_for("the scaled event over TLS with the token", scaled, 10)
        assert got[0]["name"] == "aug" and (got[0]["from"], got[0]["to"]) == (1, 2), got
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


run(globals())
