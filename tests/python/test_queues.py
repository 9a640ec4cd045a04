"""What a new user meets with the broker's defaults: large batches come full because the
broker sizes its queues from the batches asked for; a --queue-depth too small for them is said
once, in the log and in the status; a clean close is not counted as redelivery; and a consumer
that connects after the producers hears who is there."""

import os
import subprocess
import time

from helpers import BROKER, Cluster, require, run

require("numpy")
import stoker  # noqa: E402


def test_default_broker_fills_batches_of_256_from_a_fast_producer():
    # The README's setup: broker defaults, a producer with no delay (chunks of 3), batch 256.
    with Cluster() as c:
        c.producer("--delay", "0:0")
        c.wait_producers(1)
        with stoker.Client(c.url, batch_size=256, stall_timeout=4) as client:
            sizes = [b.count for b in client.batches(max_batches=8)]
            st = client.status()
        assert sizes == [256] * 8, "batches of %s, not 256" % sizes
        assert st["queue_depth_auto"] is True, st
        assert st["queue_depth"] >= 512, "depth %d for batches of 256" % st["queue_depth"]
        assert st["counters"]["short_by_queues"] == 0, st["counters"]
        assert st["queue_limit"] == "", st["queue_limit"]


def test_a_fixed_queue_depth_too_small_for_the_batch_is_said_once():
    with Cluster() as c:
        # A second broker of our own, logging warnings to a file, with the user's --queue-depth.
        log = os.path.join(c.dir, "broker.err")
        url = "ipc://" + os.path.join(c.dir, "fixed.ipc")
        with open(log, "w") as err:
            broker = subprocess.Popen([BROKER, "--listen", url, "--log-level", "warn",
                                       "--queue-depth", "64"],
                                      stdout=subprocess.DEVNULL, stderr=err)
        c.producers.append(broker)  # stopped by the cluster
        deadline = time.monotonic() + 10
        while True:
            try:
                stoker.status(url, timeout=0.2)
                break
            except stoker.StokerError:
                assert time.monotonic() < deadline and broker.poll() is None, "no broker"
                time.sleep(0.02)
        c.url = url
        c.producer("--delay", "0:0")
        with stoker.Client(url, batch_size=256, stall_timeout=4) as client:
            sizes = [b.count for b in client.batches(max_batches=5)]
            st = client.status()
        assert all(s <= 64 for s in sizes), sizes
        assert st["queue_depth_auto"] is False and st["queue_depth"] == 64, st
        assert st["counters"]["short_by_queues"] >= 5, st["counters"]
        assert "--queue-depth 64" in st["queue_limit"], st["queue_limit"]
        with open(log) as f:
            lines = [line for line in f if "queue-limit" in line]
        assert len(lines) == 1, "said %d times: %r" % (len(lines), lines)
        assert "256" in lines[0] and "--queue-depth" in lines[0], lines[0]


def test_a_clean_close_returns_prefetched_leases_unused_not_redelivered():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--chunk", "4", "--max-examples", "64")
        with stoker.Client(c.url, batch_size=4, prefetch=4, stall_timeout=4) as client:
            for _ in client.batches(max_batches=3):
                pass
        st = stoker.status(c.url)["counters"]
        assert st["acknowledged"] == 12, st
        assert st["redelivered"] == 0, "a clean close counted as redelivery: %r" % st
        assert st["returned_unused"] > 0, st
        assert st["in_flight"] == 0, st
        assert st["produced"] == st["acknowledged"] + st["queued"] + st["in_flight"], st


def test_a_consumer_that_connects_late_hears_of_the_producers_already_there():
    with Cluster() as c:
        c.producer("--delay", "0:0")
        c.producer("--delay", "0:0")
        c.wait_producers(2)
        events = []
        with stoker.Client(c.url, batch_size=8, on_event=events.append) as client:
            for _ in client.batches(max_batches=2):
                pass
        joined = {e.name for e in events if e.kind == "producer_joined"}
        assert joined == {"p1", "p2"}, events


if __name__ == "__main__":
    run(globals())
