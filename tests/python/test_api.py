"""The Python client over libstoker.so against a real broker: identities, batch memory, release
and acknowledgement, status, the end of the supply, the library's version, memoryviews."""

import gc
import os
import subprocess
import sys
import time

from helpers import Cluster, require, run

np = require("numpy")
import stoker  # noqa: E402


def test_library_speaks_this_api_version():
    assert stoker.library_api_version() == stoker.API_VERSION == 5


def test_identities_never_seen_twice_and_cover_each_batch():
    with Cluster() as c:
        for i in range(2):
            c.producer("--delay", "0:0.001", "--chunk", "8", "--seed", str(i + 1))
        seen = set()
        total = 0
        with stoker.Client(c.url, stall_timeout=5) as client:
            for batch in client.batches(16, max_batches=200):
                sessions, seqs = batch.identities()
                assert len(seqs) == batch.count == batch["input"].shape[0]
                assert sum(r.count for r in batch.runs) == batch.count
                for ident in zip(sessions.tolist(), seqs.tolist()):
                    assert ident not in seen, "identity %r delivered twice" % (ident,)
                    seen.add(ident)
                total += batch.count
            assert client.duplicates() == 0
        assert total == len(seen) == 200 * 16
        producers = {s for s, _ in seen}
        assert len(producers) == 2, "both producers' examples arrive (fair mixing)"


def test_held_batch_is_not_reused_by_later_batches():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--chunk", "16")
        with stoker.Client(c.url) as client:
            first = client.next_batch(32)
            before = {k: v.copy() for k, v in first.items()}
            addresses = {k: v.ctypes.data for k, v in first.items()}
            later = []
            for _ in range(20):  # pull (and release) more batches while holding the first
                b = client.next_batch()
                later.append({k: v.ctypes.data for k, v in b.items()})
                b.release()
                del b
                gc.collect()
            for k in before:
                assert np.array_equal(first[k], before[k]), "field %s changed under us" % k
            for addrs in later[:1]:
                assert all(addrs[k] != addresses[k] for k in addrs)
            # Released, then only an array kept: it stays readable and unchanged.
            keep = first["input"]
            first.release()
            del first
            gc.collect()
            for _ in range(5):
                client.next_batch().release()
            gc.collect()
            assert np.array_equal(keep, before["input"])


def test_each_batch_is_acknowledged_when_the_next_is_requested():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--chunk", "8")
        with stoker.Client(c.url, batch_size=8) as client:
            it = client.batches()
            next(it)
            next(it)  # acknowledges the first (sent with the next pull)
            next(it)  # acknowledges the second
            # The acknowledgements travel with pulls that the broker may handle after a status
            # request sent later (its contexts run in parallel): wait for them, briefly.
            deadline = time.monotonic() + 3
            while True:
                st = client.status()
                assert st["counters"]["discrepancy"] == 0
                acked = st["counters"]["acknowledged"]
                if acked >= 8 or time.monotonic() > deadline:
                    break
                time.sleep(0.01)
            # The first, perhaps the second already (a pull may leave before its ack is made).
            assert acked in (8, 16), acked
        st = stoker.status(c.url)
        # close() acknowledged the last batch the loop held: 3 batches in all.
        assert st["counters"]["acknowledged"] == 24, st["counters"]


def test_unfinished_batch_of_a_failed_block_is_redelivered():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--chunk", "8", "--max-examples", "16")
        try:
            with stoker.Client(c.url, batch_size=8) as client:
                for batch in client.batches():
                    raise RuntimeError("training step failed")
        except RuntimeError:
            pass
        # The batch the loop failed on was not acknowledged: another consumer gets it again.
        with stoker.Client(c.url, batch_size=8, stall_timeout=2) as client:
            got = 0
            try:
                for batch in client.batches():
                    got += batch.count
            except stoker.SupplyEnded as e:
                assert e.finished
            assert got == 16, got
        st = stoker.status(c.url)["counters"]
        # At least the failed batch came back (prefetched ones too: prefetch pulls ahead).
        assert st["acknowledged"] == 16 and st["redelivered"] >= 8, st


def test_supply_end_after_producers_finish_is_supply_ended_with_reason():
    with Cluster() as c:
        # Slow enough that the producer finishes while the client listens (events before a
        # client connects are not replayed to it).
        c.producer("--delay", "0.005:0.01", "--chunk", "4", "--max-examples", "40")
        c.wait_producers(1)
        events = []
        n = 0
        with stoker.Client(c.url, on_event=events.append) as client:
            try:
                for batch in client.batches(8):
                    n += batch.count
                raise AssertionError("no SupplyEnded")
            except stoker.SupplyEnded as e:
                assert e.finished and e.name == "end_of_data"
                assert isinstance(e, stoker.StokerError)
                assert "finished" in e.reason and "p1" in e.reason, e.reason
        assert n == 40
        assert any(e.kind == "producer_finished" and e.name == "p1" for e in events), events


def test_status_counters_and_table():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--chunk", "4", "--max-examples", "12", name="table-me")
        c.wait_producers(1)
        st = stoker.status(c.url)
        assert st["counters"]["discrepancy"] == 0
        assert st["producers"][0]["name"] == "table-me"
        out = subprocess.run([sys.executable, "-m", "stoker.status", c.url],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert "table-me" in out.stdout and "produced" in out.stdout, out.stdout
        bad = subprocess.run([sys.executable, "-m", "stoker.status",
                              "ipc://" + os.path.join(c.dir, "nothing.ipc"), "--timeout", "0.3"],
                             capture_output=True, text=True, timeout=30)
        assert bad.returncode == 1 and "stoker.status" in bad.stderr, bad


def test_wrong_broker_is_a_connection_error():
    with Cluster() as c:
        client = stoker.Client("ipc://" + os.path.join(c.dir, "none.ipc"), connect_timeout=0.3)
        try:
            client.next_batch(4)
            raise AssertionError("connected to nothing")
        except stoker.StokerError as e:
            assert e.name == "connection", e.name
            assert not isinstance(e, (stoker.SupplyEnded, stoker.Stalled))


def test_without_numpy_fields_are_memoryviews():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--chunk", "4")
        code = ("import sys; sys.modules['numpy'] = None\n"
                "import stoker\n"
                "with stoker.Client(%r) as cl:\n"
                "    b = cl.next_batch(4)\n"
                "    v = b['input']\n"
                "    assert isinstance(v, memoryview) and v.shape == (4, 10), v.shape\n"
                "    assert v.format == 'f' and 0 <= v[0, 0] < 1\n"
                "    assert b['output'].shape == (4, 1)\n"
                "    assert len(b.identities()) == 4\n"
                "    b.release()\n"
                "print('memoryviews ok')\n" % c.url)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0 and "memoryviews ok" in out.stdout, out.stdout + out.stderr


run(globals())
