"""Supply death and stalls reach the Python loop as exceptions with the broker's reason:
killing every producer raises SupplyEnded within a second; stopping them (SIGSTOP: alive but
silent) raises Stalled after the stall timeout. Run alone: these assert latencies."""

import signal
import threading
import time

from helpers import Cluster, require, run

require("numpy")
import stoker  # noqa: E402


def drain_until_error(client, batch_size):
    """Pulls (and releases) batches until an exception; returns it and when it came."""
    try:
        for _ in client.batches(batch_size):
            pass
    except stoker.StokerError as e:
        return e, time.monotonic()
    raise AssertionError("batches() ended without an exception")


def test_killing_every_producer_raises_supply_ended_within_a_second():
    with Cluster() as c:
        for _ in range(2):
            c.producer("--delay", "0.001:0.002", "--chunk", "4")
        c.wait_producers(2)
        events = []
        with stoker.Client(c.url, stall_timeout=10, on_event=events.append) as client:
            for _ in client.batches(8, max_batches=20):
                pass
            killed = time.monotonic()
            c.signal_producers(signal.SIGKILL)
            e, at = drain_until_error(client, 8)
        assert isinstance(e, stoker.SupplyEnded), repr(e)
        assert not e.finished and e.name == "no_producers"
        assert at - killed < 1.0, "SupplyEnded %.3f s after the kill" % (at - killed)
        assert "lost" in e.reason and "connection closed" in e.reason, e.reason
        lost = {ev.name for ev in events if ev.kind == "producer_lost"}
        assert lost == {"p1", "p2"}, events
        print("SupplyEnded %.0f ms after the kill: %s" % (1000 * (at - killed), e.reason))


def test_stopped_producers_raise_stalled_after_the_timeout():
    # Producers are not declared lost for 30 s: only the consumer's stall timeout can fire.
    with Cluster("--producer-timeout", "30") as c:
        for _ in range(2):
            c.producer("--delay", "0.001:0.002", "--chunk", "4")
        c.wait_producers(2)
        with stoker.Client(c.url, stall_timeout=1.0) as client:
            for _ in client.batches(8, max_batches=10):
                pass
            stopped = time.monotonic()
            c.signal_producers(signal.SIGSTOP)
            e, at = drain_until_error(client, 8)
        assert isinstance(e, stoker.Stalled), repr(e)
        assert e.name == "stalled" and "1.0 s" in e.reason, e.reason
        waited = at - stopped
        # The queued examples drain first; then nothing for the 1 s timeout.
        assert 0.95 <= waited < 3.0, "Stalled %.3f s after SIGSTOP" % waited
        print("Stalled %.2f s after SIGSTOP: %s" % (waited, e.reason))


def test_a_producer_paused_past_the_producer_timeout_comes_back_and_nothing_ends():
    # The only producer, frozen 4 s with the default --producer-timeout (3 s): the loss is told
    # at once, but its connection is open, so the supply waits for it (--silent-grace, default
    # 30 s) instead of ending; back, it resumes with what it retains: every example once, then
    # the supply's end, finished.
    total = 400
    with Cluster() as c:
        c.producer("--delay", "0.004:0.004", "--chunk", "4", "--max-examples", str(total))
        c.wait_producers(1)
        events = []
        seen = []
        with stoker.Client(c.url, stall_timeout=20, on_event=events.append) as client:
            for b in client.batches(8, max_batches=5):
                seen += list(zip(*[a.tolist() for a in b.identities()]))
            # Frozen while the loop goes on consuming (and acknowledging) what is queued.
            stopped = time.monotonic()
            c.signal_producers(signal.SIGSTOP)
            waking = threading.Timer(4.0, c.signal_producers, (signal.SIGCONT,))
            waking.start()
            e, at = None, None
            try:
                for b in client.batches(8):
                    seen += list(zip(*[a.tolist() for a in b.identities()]))
            except stoker.StokerError as err:
                e, at = err, time.monotonic()
            waking.join()
        assert isinstance(e, stoker.SupplyEnded), repr(e)
        assert e.finished, "the supply ended with %s, not finished: %s" % (e.name, e.reason)
        assert at - stopped > 4.0, "the supply ended %.1f s after the stop" % (at - stopped)
        kinds = [ev.kind for ev in events]
        assert "producer_lost" in kinds and "producer_reconnected" in kinds, kinds
        assert len(seen) == total, "%d examples delivered of %d" % (len(seen), total)
        assert len(set(seen)) == total, "%d repeated" % (len(seen) - len(set(seen)))
        print("paused 4 s: lost and back, %d examples once each, %s" % (len(seen), e.reason))


run(globals())
