"""deploy/prometheus/ for real, with Debian's prometheus and promtool:
  rules: `promtool check rules` and `check config` accept the shipped files as they are, and
         `promtool test rules` runs their unit tests (the operator values: 5 minutes starved...);
  live:  prometheus on loopback scrapes a live broker (producers and a trainer) with the shipped
         rules made short for a test (scrape and evaluation every second, `for:` of seconds, rate
         windows of seconds: derived from the shipped file, never a separate copy); its HTTP API
         gives a non-zero rate of trained examples that matches the broker's own (from /status,
         over the same window); SIGSTOPped producers starve the trainer and StokerDataStarved
         goes to firing; a SIGKILLed producer fires StokerProducerLost.
Usage: test_prometheus.py [rules|live] (both without an argument)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live import SOURCE, Broker, ensure, free_port, http_get, wait_for  # noqa: E402

DEPLOY = os.path.join(SOURCE, "deploy", "prometheus")
RULES = os.path.join(DEPLOY, "stoker.rules.yml")


def promtool(*args):
    r = subprocess.run(["promtool"] + list(args), cwd=DEPLOY, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, "promtool %s: %s%s" % (" ".join(args), r.stdout, r.stderr)
    return r.stdout


def test_rules():
    ensure(["promtool", "prometheus"], "prometheus")
    out = promtool("check", "rules", "stoker.rules.yml")
    assert "SUCCESS: 9 rules found" in out, out
    promtool("check", "config", "prometheus.yml")
    out = promtool("test", "rules", "stoker.rules.test.yml")
    print(out.strip())


def short_rules(text):
    """The shipped rules made fast for a test: rate windows of 1 m and 5 m become 5 s and 10 s,
    every `for:` 3 s. The expressions, thresholds and names stay the shipped ones."""
    text = text.replace("[1m]", "[5s]").replace("[5m]", "[10s]")
    text, n = re.subn(r"(\n\s+for: )\d+m\n", r"\g<1>3s\n", text)
    assert n == 3, "expected 3 'for:' in %s, found %d" % (RULES, n)
    return text


class Prometheus:
    def __init__(self, target, token_path=None):
        ensure(["promtool", "prometheus"], "prometheus")
        self.dir = tempfile.mkdtemp(prefix="stoker-prometheus-")
        with open(RULES) as f:
            rules = short_rules(f.read())
        with open(os.path.join(self.dir, "stoker.rules.yml"), "w") as f:
            f.write(rules)
        # The shipped scrape config with the test's target and intervals.
        with open(os.path.join(DEPLOY, "prometheus.yml")) as f:
            conf = f.read()
        conf = conf.replace('["localhost:9090"]', '["%s"]' % target)
        conf = re.sub(r"scrape_interval: \d+s", "scrape_interval: 1s", conf)
        conf = re.sub(r"evaluation_interval: \d+s", "evaluation_interval: 1s", conf)
        assert target in conf, conf
        cpath = os.path.join(self.dir, "prometheus.yml")
        with open(cpath, "w") as f:
            f.write(conf)
        r = subprocess.run(["promtool", "check", "config", cpath], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        self.port = free_port()
        self.api = "http://127.0.0.1:%d/api/v1/" % self.port
        self.log = open(os.path.join(self.dir, "prometheus.log"), "wb")
        self.proc = subprocess.Popen(
            ["prometheus", "--config.file=" + cpath, "--storage.tsdb.path=" + self.dir + "/data",
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("prometheus to answer", lambda: http_get(self.api + "status/buildinfo")[0] == 200,
                 30)

    def query(self, expr, at=None):
        q = {"query": expr}
        if at is not None:
            q["time"] = "%.3f" % at
        code, body = http_get(self.api + "query?" + urllib.parse.urlencode(q))
        assert code == 200, (expr, code, body)
        return json.loads(body)["data"]["result"]

    def alerts(self):
        code, body = http_get(self.api + "alerts")
        assert code == 200, body
        return {(a["labels"]["alertname"], a["state"]) for a in json.loads(body)["data"]["alerts"]}

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if self.proc.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL):
            with open(os.path.join(self.dir, "prometheus.log")) as f:
                print(f.read()[-3000:])
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def test_live():
    # --producer-timeout 60: a stopped producer stays alive (not lost) for the whole test, so the
    # trainer waits for data instead of being told that the supply ended.
    with Broker("--producer-timeout", "60") as b:
        # Free examples in large chunks and a trainer with work to do (a wide hidden layer): the
        # trainer is the bottleneck and waits little until the producers stop.
        prods = [b.producer("aug-%d" % i, "--delay", "0:0", "--chunk", "64") for i in (1, 2, 3)]
        b.trainer("--rounds", "100000000", "--time-goal", "150", "--stall-timeout", "60",
                  "--batch-size", "64", "--hidden", "1024")
        target = b.http[len("http://"):]
        with Prometheus(target) as prom:
            wait_for("prometheus to scrape the broker",
                     lambda: [r for r in prom.query('up{job="stoker"}') if r["value"][1] == "1"],
                     20)
            wait_for("a non-zero rate of trained examples in prometheus",
                     lambda: [r for r in prom.query("stoker:trained:rate1m")
                              if float(r["value"][1]) > 0], 20)
            # The broker's own figure over 10 s against prometheus's rate over the same 10 s.
            a, ta = b.status(), time.time()
            time.sleep(10)
            z, tz = b.status(), time.time()
            ours = ((z["counters"]["acknowledged"] - a["counters"]["acknowledged"])
                    / (z["uptime_s"] - a["uptime_s"]))
            time.sleep(1.5)  # the scrape after tz is in
            theirs = float(prom.query("rate(stoker_acknowledged_total[%.0fs])" % (tz - ta),
                                      at=tz)[0]["value"][1])
            print("trained examples/s: broker %.1f, prometheus %.1f" % (ours, theirs))
            assert ours > 0 and theirs > 0, (ours, theirs)
            assert abs(theirs - ours) <= 0.2 * ours, ("prometheus's rate is not the broker's",
                                                      ours, theirs)
            firing = prom.alerts()
            assert ("StokerDataStarved", "firing") not in firing, firing

            # Producers stopped: the trainer waits, its data wait share goes to ~1, the alert
            # fires (window 5 s, for 3 s, evaluated every second: well within 30 s).
            for p in prods:
                os.kill(p.pid, signal.SIGSTOP)
            t0 = time.monotonic()
            wait_for("StokerDataStarved firing",
                     lambda: ("StokerDataStarved", "firing") in prom.alerts(), 30, every=0.5)
            wait_s = float(prom.query("stoker:data_wait:max_ratio_rate1m")[0]["value"][1])
            print("StokerDataStarved firing %.1f s after SIGSTOP (data wait %.2f)"
                  % (time.monotonic() - t0, wait_s))
            assert wait_s > 0.5, wait_s
            # Not a stall: nothing is queued, the trainer waits for data.
            assert ("StokerTrainerStalled", "firing") not in prom.alerts()

            # A producer killed: StokerProducerLost.
            os.kill(prods[0].pid, signal.SIGKILL)
            wait_for("StokerProducerLost firing",
                     lambda: ("StokerProducerLost", "firing") in prom.alerts(), 15, every=0.5)
            print("StokerProducerLost firing")
            for p in prods[1:]:
                os.kill(p.pid, signal.SIGCONT)


if __name__ == "__main__":
    which = sys.argv[1:] or ["rules", "live"]
    for name in which:
        {"rules": test_rules, "live": test_live}[name]()
        print("ok: %s" % name)
