"""The broker's autoscale signal (docs/autoscale.md): a real broker with --metrics on a
free port, real producers of a known cost (--delay) and a real trainer that takes a fixed number
of examples per second. producers_wanted must come within one of ceil(rate x cost x headroom);
with producers far faster than the trainer, or no trainer at all, the minimum. /status, /metrics
and the Status request (stoker.status) must all carry it."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from helpers import BROKER, PRODUCER, metrics_url, run  # noqa: E402

import stoker  # noqa: E402

# A trainer that takes RATE examples/s in batches of BATCH, never faster.
TRAINER = r"""
import sys, time
import stoker
url, rate, batch = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
with stoker.Client(url, batch_size=batch, stall_timeout=60) as c:
    t = time.monotonic()
    while True:
        with c.next_batch():
            pass
        t += batch / rate
        if t > time.monotonic():
            time.sleep(t - time.monotonic())
"""


class Broker:
    def __init__(self, *args):
        self.dir = tempfile.mkdtemp(prefix="stoker-autoscale-")
        self.url = "ipc://" + os.path.join(self.dir, "broker.ipc")
        self.procs = []
        self.broker = subprocess.Popen([BROKER, "--listen", self.url, "--metrics",
                                        "http://127.0.0.1:0", "--log-level", "error"]
                                       + list(args), stdout=subprocess.PIPE)
        try:
            self.http = metrics_url(self.broker)
        except RuntimeError:
            self.close()
            raise

    def producer(self, name, *args):
        self.procs.append(subprocess.Popen([PRODUCER, "--broker", self.url, "--name", name,
                                            "--log-level", "error"] + list(args)))

    def trainer(self, rate, batch):
        p = subprocess.Popen([sys.executable, "-c", TRAINER, self.url, str(rate), str(batch)])
        self.procs.append(p)
        return p

    def get(self, path):
        with urllib.request.urlopen(self.http + path, timeout=5) as r:
            return r.read().decode()

    def pools(self):
        return {p["pool"]: p for p in json.loads(self.get("/status"))["autoscale"]["pools"]}

    def close(self):
        for p in self.procs + [self.broker]:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def test_wanted_follows_rate_and_cost():
    rate, cost, headroom = 200.0, 0.01, 1.2
    expect = math.ceil(rate * cost * headroom)  # 3
    with Broker() as b:
        for i in range(4):
            b.producer("aug-%d" % i, "--delay", str(cost), "--pool", "aug")
        b.trainer(rate, 20)
        time.sleep(15)  # the signal is smoothed over ~10 s
        seen = []
        for _ in range(5):
            p = b.pools()["aug"]
            seen.append((p["wanted"], p["demand"], p["supply_per_producer"], p["why"]))
            time.sleep(1)
        print("expect %d, seen %s" % (expect, seen))
        for wanted, demand, supply, why in seen:
            assert abs(wanted - expect) <= 1, (expect, seen)
            assert p["current"] == 4 and "examples/s" in why, p
            # A trainer paced at `rate` and fed: its demand is its rate (within 15 %), not its
            # rate inflated by the waits of its own pacing; one producer makes 1 / cost.
            assert abs(demand - rate) <= 0.15 * rate, (rate, seen)
            assert 0.8 / cost <= supply <= 1.05 / cost, (cost, seen)
        # The supply's spread over the last minute holds the supply read now.
        assert p["supply_low"] <= p["supply_per_producer"] <= p["supply_high"], p
        assert p["supply_low"] > 0, p
        # Every view carries it: /metrics and the Status request.
        metrics = b.get("/metrics")
        assert 'stoker_producers_wanted{pool="aug"} ' in metrics, metrics
        assert 'stoker_pool_demand{pool="aug"} ' in metrics
        assert 'stoker_pool_supply_per_producer{pool="aug"} ' in metrics
        st = stoker.status(b.url)
        assert st["autoscale"]["headroom"] == headroom, st["autoscale"]
        assert [p["pool"] for p in st["autoscale"]["pools"]] == ["aug"], st["autoscale"]
        sp = st["autoscale"]["pools"][0]
        assert 0 < sp["supply_low"] <= sp["supply_high"], sp


def test_new_producers_do_not_read_slow():
    # A starved trainer keeps every producer flat out; producers started later are measured from
    # their second sample on: their start (the first chunks made but not yet accepted) read them
    # 25-40 % slow for tens of seconds, and the controller overshot by as much.
    cost = 0.01
    with Broker() as b:
        b.producer("first", "--delay", str(cost))
        b.trainer(1000, 20)
        time.sleep(8)
        before = b.pools()["default"]["supply_per_producer"]
        for i in range(3):
            b.producer("later-%d" % i, "--delay", str(cost))
        after = []
        for _ in range(8):
            time.sleep(1)
            p = b.pools()["default"]
            after.append((p["current"], p["supply_per_producer"]))
        print("supply before %.1f, after %s" % (before, after))
        assert 0.8 / cost <= before <= 1.05 / cost, before
        assert after[-1][0] == 4, after
        assert all(s >= 0.88 * before for _, s in after), (before, after)
        # Starved, the trainer says "more", at most 4 times what it takes now.
        p = b.pools()["default"]
        assert p["demand"] <= 4.05 * 4 / cost, p


def test_fast_producers_and_no_trainer_want_the_minimum():
    with Broker("--autoscale-min", "1", "--autoscale-max", "8") as b:
        b.producer("fast-1", "--delay", "0")
        b.producer("fast-2", "--delay", "0")
        time.sleep(2)
        p = b.pools()["default"]
        assert p["wanted"] == 1 and "no trainer" in p["why"], p
        t = b.trainer(50, 10)
        time.sleep(8)
        p = b.pools()["default"]
        assert p["demand"] > 20 and p["supply_per_producer"] > 100, p
        assert p["wanted"] == 1 and p["current"] == 2, p
        t.send_signal(signal.SIGKILL)
        t.wait()
        time.sleep(3)
        a = json.loads(b.get("/status"))["autoscale"]
        assert a["idle_s"] is not None and a["idle_s"] > 1.0, a
        assert a["pools"][0]["wanted"] == 1 and "no trainer" in a["pools"][0]["why"], a


def test_bad_bounds_are_usage_errors():
    r = subprocess.run([BROKER, "--listen", "ipc:///nonexistent/x", "--autoscale-min", "5",
                        "--autoscale-max", "2"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "--autoscale-min" in r.stderr, (r.returncode, r.stderr)
    r = subprocess.run([BROKER, "--listen", "ipc:///nonexistent/x", "--autoscale-headroom",
                        "0.5"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "autoscale-headroom" in r.stderr, (r.returncode, r.stderr)


if __name__ == "__main__":
    run(globals())
