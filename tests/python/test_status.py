"""The broker's status has one set of names: /status (the broker's HTTP JSON), the Status reply
as `python3 -m stoker.status --json` prints it, and /metrics all render one snapshot. A real
broker with --metrics on a free port and real producers (one with a name that needs JSON
escaping); the views must agree key for key and value for value (times within a margin)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from helpers import BROKER, PRODUCER, metrics_url, run  # noqa: E402

import stoker  # noqa: E402

# Values that move with the clock: compared within a margin, not exactly.
TIMES = {"uptime_s", "silent_s"}
ODD_NAME = 'odd "name" \\ tab\t'


class MetricsBroker:
    """A broker on an ipc:// path with --metrics on a port the system picks (read back from its
    "metrics http://HOST:PORT" line), and producers; close() leaves no process behind."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="stoker-status-")
        self.url = "ipc://" + os.path.join(self.dir, "broker.ipc")
        self.producers = []
        self.broker = subprocess.Popen([BROKER, "--listen", self.url, "--metrics",
                                        "http://127.0.0.1:0", "--log-level", "error"],
                                       stdout=subprocess.PIPE)
        try:
            self.http = metrics_url(self.broker)
        except RuntimeError:
            self.close()
            raise

    def producer(self, name, *args):
        self.producers.append(subprocess.Popen(
            [PRODUCER, "--broker", self.url, "--name", name, "--log-level", "error"] + list(args)))

    def get(self, path):
        with urllib.request.urlopen(self.http + path, timeout=5) as r:
            return r.read().decode()

    def close(self):
        for p in self.producers + [self.broker]:
            if p.poll() is None:
                p.kill()
            p.wait()
        if self.broker.stdout is not None:
            self.broker.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def agree(a, b, where="status"):
    """Asserts a and b (read after a) have the same keys at every level and the same values; the
    times in b are at most 5 s later."""
    assert type(a) is type(b), "%s: %r against %r" % (where, a, b)
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), "%s: keys %s against %s" % (where, sorted(a), sorted(b))
        for k in a:
            if k in TIMES:
                assert isinstance(a[k], float) and isinstance(b[k], float), (where, k)
                # b was read after a: the clock only moved on.
                assert 0.0 <= b[k] - a[k] < 5.0, "%s.%s: %r against %r" % (where, k, a[k], b[k])
            else:
                agree(a[k], b[k], "%s.%s" % (where, k))
    elif isinstance(a, list):
        assert len(a) == len(b), "%s: %d items against %d" % (where, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            agree(x, y, "%s[%d]" % (where, i))
    else:
        assert a == b, "%s: %r against %r" % (where, a, b)


def settled(c, n):
    """Waits until n producers have said goodbye (the counters then stand still)."""
    deadline = time.monotonic() + 20
    while True:
        st = json.loads(c.get("/status"))
        if len(st["producers"]) == n and all(p["state"] == "finished" for p in st["producers"]):
            return st
        if time.monotonic() > deadline:
            raise AssertionError("producers did not finish: %r" % st["producers"])
        time.sleep(0.05)


def test_status_page_and_python_status_agree_key_for_key():
    with MetricsBroker() as c:
        for name in ("alpha", ODD_NAME):
            c.producer(name, "--delay", "0:0", "--chunk", "8", "--max-examples", "24")
        page = settled(c, 2)
        out = subprocess.run([sys.executable, "-m", "stoker.status", c.url, "--json"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        agree(page, json.loads(out.stdout))
        # What was asserted is not vacuous: the keys of both, the escaped name, the counters.
        for key in ("uptime_s", "schema", "queue_depth", "max_bytes", "counters",
                    "producers_alive", "trainers", "trainers_shm", "producers", "events",
                    "consumers", "jobs", "sharing"):
            assert key in page, key
        # No trainer said hello: no job shares the producers yet.
        assert page["jobs"] == [] and page["sharing"] is None, (page["jobs"], page["sharing"])
        assert sorted(p["name"] for p in page["producers"]) == sorted(["alpha", ODD_NAME])
        assert page["counters"]["produced"] == 48 and page["counters"]["queued"] == 48
        assert page["counters"]["discrepancy"] == 0
        assert [e["kind"] for e in page["events"]].count("producer_finished") == 2
        # The library's own call and the table print the same snapshot.
        agree(page, stoker.status(c.url))
        table = subprocess.run([sys.executable, "-m", "stoker.status", c.url],
                               capture_output=True, text=True, timeout=30)
        assert table.returncode == 0, table.stderr
        assert "0 producers alive, 0 trainers" in table.stdout, table.stdout


def test_status_shows_each_distinct_label_map_once_and_python_agrees():
    # Two images producers on one folder say the same class-to-label map: listed once with both
    # ids; a third on another folder has its own. The library's status renders the same block.
    root = os.environ.get("STOKER_SOURCE_ROOT", ".")

    def make(folder, classes, per_class):
        subprocess.run([sys.executable, os.path.join(root, "bench", "make_images.py"), folder,
                        str(classes), str(per_class), "24", "16"], check=True,
                       capture_output=True)

    with MetricsBroker() as c:
        folder, solo = os.path.join(c.dir, "images"), os.path.join(c.dir, "solo")
        make(folder, 3, 2)
        make(solo, 1, 1)
        os.makedirs(os.path.join(folder, 'odd "class"'))  # a name JSON must escape, nested
        shutil.copytree(os.path.join(solo, "class0"), os.path.join(folder, 'odd "class"', "in"))
        for name, where in (("img-a", folder), ("img-b", folder), ("img-c", solo)):
            c.producer(name, "--generator", "images", "--images", where, "--size", "8",
                       "--chunk", "4", "--max-examples", "8")
        page = settled(c, 3)
        ids = {p["name"]: p["id"] for p in page["producers"]}
        maps = sorted(page["labels"]["maps"], key=lambda m: -m["classes"])
        assert maps == [
            {"producers": sorted([ids["img-a"], ids["img-b"]]), "classes": 4, "listed": 4,
             "truncated": False,
             "labels": [{"label": 0, "name": "class0", "files": 2},
                        {"label": 1, "name": "class1", "files": 2},
                        {"label": 2, "name": "class2", "files": 2},
                        {"label": 3, "name": 'odd "class"', "files": 1}]},
            {"producers": [ids["img-c"]], "classes": 1, "listed": 1, "truncated": False,
             "labels": [{"label": 0, "name": "class0", "files": 1}]}], page["labels"]
        assert page["labels"]["omitted"] == 0
        agree(page, stoker.status(c.url))
        out = subprocess.run([sys.executable, "-m", "stoker.status", c.url, "--json"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        agree(page, json.loads(out.stdout))
        table = subprocess.run([sys.executable, "-m", "stoker.status", c.url],
                               capture_output=True, text=True, timeout=30)
        assert table.returncode == 0, table.stderr
        assert ("4 classes: 0 class0 (2 files), 1 class1 (2 files), 2 class2 (2 files), "
                '3 odd "class" (1 files)') in table.stdout, table.stdout


def test_metrics_render_the_same_snapshot():
    with MetricsBroker() as c:
        c.producer("beta", "--delay", "0:0", "--chunk", "4", "--max-examples", "12")
        page = settled(c, 1)
        metrics = {}
        for line in c.get("/metrics").splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                metrics[name] = float(value)
        counters = page["counters"]
        for key, metric in (("produced", "stoker_produced_total"),
                            ("acknowledged", "stoker_acknowledged_total"),
                            ("delivered", "stoker_delivered_total"),
                            ("redelivered", "stoker_redelivered_total"),
                            ("queued", "stoker_queued"), ("in_flight", "stoker_in_flight"),
                            ("queued_bytes", "stoker_queued_bytes"),
                            ("refused", "stoker_refused_total")):
            assert metrics[metric] == counters[key], (metric, metrics[metric], counters[key])
        assert metrics["stoker_producers_alive"] == page["producers_alive"]
        assert metrics["stoker_trainers_connected"] == page["trainers"]
        p = page["producers"][0]
        labels = '{producer="%d",name="beta"}' % p["id"]
        assert metrics["stoker_producer_queue_depth" + labels] == p["queued"] == 12
        assert metrics["stoker_producer_accepted_total" + labels] == p["accepted"] == 12
        assert metrics["stoker_producer_alive" + labels] == 0
        assert metrics["stoker_jobs"] == len(page["jobs"]) == 0



def client_with_shm(url, shm):
    """A stoker.Client made with STOKER_SHM set to shm ("1" or "0") for its creation only."""
    old = os.environ.get("STOKER_SHM")
    os.environ["STOKER_SHM"] = shm
    try:
        return stoker.Client(url, batch_size=8, stall_timeout=10, name="shm-" + shm)
    finally:
        if old is None:
            del os.environ["STOKER_SHM"]
        else:
            os.environ["STOKER_SHM"] = old


def test_status_names_each_consumers_delivery_path():
    # One broker, two consumers in this process: one through shared memory (the default on the
    # broker's host), one with STOKER_SHM=0. /status, the Status reply and /metrics name each
    # one's path and count its batches on that path only.
    with MetricsBroker() as c:
        c.producer("gamma", "--delay", "0:0", "--chunk", "8")
        shm, sock = client_with_shm(c.url, "1"), client_with_shm(c.url, "0")
        try:
            for _ in range(3):
                for cl in (shm, sock):
                    cl.next_batch().release()
            assert (shm.delivery, sock.delivery) == ("shm", "socket")
            page = json.loads(c.get("/status"))
            lib = stoker.status(c.url)
            metrics = c.get("/metrics")
        finally:
            shm.close()
            sock.close()
        for st in (page, lib):
            by_name = {e["name"]: e for e in st["consumers"]}
            assert sorted(by_name) == ["shm-0", "shm-1"], st["consumers"]
            s, o = by_name["shm-1"], by_name["shm-0"]
            assert s["delivery"] == "shm" and o["delivery"] == "socket", st["consumers"]
            assert s["pid"] == o["pid"] == os.getpid(), st["consumers"]
            assert s["connected"] and o["connected"]
            assert s["batches_shm"] >= 3 and s["batches_socket"] == 0, s
            assert o["batches_socket"] >= 3 and o["batches_shm"] == 0, o
            assert s["examples_shm"] == 8 * s["batches_shm"] and s["bytes_shm"] > 0, s
            assert o["examples_socket"] == 8 * o["batches_socket"] and o["bytes_socket"] > 0, o
            assert s["arena_full"] == o["arena_full"] == 0
            assert s["job"] == o["job"] == "", st["consumers"]  # the default job
            assert st["trainers"] == 2 and st["trainers_shm"] == 1, st
        assert 'stoker_consumers{delivery="shm"} 1\n' in metrics, metrics
        assert 'stoker_consumers{delivery="socket"} 1\n' in metrics, metrics
        assert "stoker_trainers_shm 1\n" in metrics, metrics
        s = {e["name"]: e for e in page["consumers"]}["shm-1"]
        assert ('stoker_consumer_batches_total{consumer="%d",name="shm-1",path="socket"} 0\n'
                % s["id"]) in metrics, metrics
        # Said goodbye: still listed, no longer connected, no longer counted by path.
        after = json.loads(c.get("/status"))
        assert not any(e["connected"] for e in after["consumers"]), after["consumers"]
        assert 'stoker_consumers{delivery="shm"} 0\n' in c.get("/metrics")
        # The table names each one's path too.
        table = subprocess.run([sys.executable, "-m", "stoker.status", c.url],
                               capture_output=True, text=True, timeout=30)
        assert table.returncode == 0, table.stderr
        rows = {line.split()[1]: line.split() for line in table.stdout.splitlines()
                if line.split()[1:2] in (["shm-1"], ["shm-0"])}
        assert rows["shm-1"][4] == "shm" and rows["shm-0"][4] == "socket", table.stdout


if __name__ == "__main__":
    run(globals())
