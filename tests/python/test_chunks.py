"""Chunks sized by bytes and time: with every default a cheap producer fills chunks of
thousands of examples (the broker's counters: examples accepted per push), while an expensive
one still pushes each example as soon as it is made; examples of moderate cost wait at most the
time bound for their chunk; every example is delivered exactly once; --chunk N still fixes the
count, and one larger than the broker takes is a clear error, not an endless retry; bad values
of the chunk flags are usage errors (exit 2)."""

import subprocess
import time

from helpers import PRODUCER, Cluster, reap, require, run

require("numpy")
import stoker  # noqa: E402


def producer_counts(st, name):
    """(accepted, pushes) of the producer named name in a status dict."""
    for p in st["producers"]:
        if p["name"] == name:
            return p["accepted"], p["pushes"]
    raise AssertionError("no producer %r in %r" % (name, st["producers"]))


def test_a_cheap_producer_with_defaults_fills_large_chunks_each_example_once():
    total = 200000
    with Cluster() as c:
        c.producer("--delay", "0:0", "--max-examples", str(total), name="cheap")
        seen = set()
        with stoker.Client(c.url, batch_size=256, stall_timeout=4) as client:
            try:
                for b in client.batches():
                    sessions, seqs = b.identities()
                    seen.update(int(s) for s in seqs)
            except stoker.SupplyEnded:
                pass
            dups = client.duplicates()
            st = client.status()
        accepted, pushes = producer_counts(st, "cheap")
        assert accepted == total and len(seen) == total and dups == 0, (accepted, len(seen), dups)
        # 44-byte examples: a 256 KiB chunk holds 5957; the old default pushed 3 at a time.
        assert accepted / pushes >= 1000, "%d examples in %d pushes" % (accepted, pushes)
        assert st["counters"]["acknowledged"] == total, st["counters"]


def test_chunks_of_large_examples_hold_the_trainers_batch():
    # 150,528-byte examples: 256 KiB (--chunk-bytes) holds one, so chunks followed the byte
    # budget alone were one example each and a batch of 32 was 32 parts. Once the trainer
    # pulls batches of 32 the broker says so in its push replies and a chunk holds 32 (4.8 MB,
    # within --chunk-batch-bytes' 8 MiB). --chunk-ms 1000: the pipe's pace (a loaded machine)
    # must not close them first. The first chunks, pushed before the trainer's first pull,
    # still hold one each (the queue takes 64 of them).
    total = 2400
    with Cluster() as c:
        c.producer("--generator", "exec", "--exec", "cat /dev/zero", "--format", "raw",
                   "--schema", "image:uint8[224,224,3]", "--chunk-ms", "1000",
                   "--max-examples", str(total), name="large")
        with stoker.Client(c.url, batch_size=32, stall_timeout=4) as client:
            got = 0
            try:
                for b in client.batches():
                    got += b.count
            except stoker.SupplyEnded:
                pass
            st = client.status()
        accepted, pushes = producer_counts(st, "large")
        assert got == total and accepted == total, (got, accepted)
        assert accepted / pushes >= 8, "%d examples in %d pushes" % (accepted, pushes)
    # --chunk-batch-bytes 0: the byte budget alone, one example a chunk.
    with Cluster() as c:
        c.producer("--generator", "exec", "--exec", "cat /dev/zero", "--format", "raw",
                   "--schema", "image:uint8[224,224,3]", "--chunk-ms", "1000",
                   "--chunk-batch-bytes", "0", "--max-examples", "200", name="bytes")
        with stoker.Client(c.url, batch_size=32, stall_timeout=4) as client:
            try:
                for b in client.batches():
                    pass
            except stoker.SupplyEnded:
                pass
            st = client.status()
        assert producer_counts(st, "bytes") == (200, 200), producer_counts(st, "bytes")


def test_an_expensive_producer_pushes_each_example_as_soon_as_it_is_made():
    # 50 ms per example, ten times the 5 ms bound: each goes out alone, when it is made, so
    # they arrive 50 ms apart (a chunk waiting for its byte budget would hold them for minutes).
    n = 20
    with Cluster() as c:
        c.producer("--delay", "0.05:0.05", "--max-examples", str(n), name="slow")
        arrivals = {}
        with stoker.Client(c.url, batch_size=1, stall_timeout=4) as client:
            try:
                for b in client.batches():
                    now = time.monotonic()
                    for seq in b.identities()[1]:
                        arrivals[int(seq)] = now
            except stoker.SupplyEnded:
                pass
            st = client.status()
        accepted, pushes = producer_counts(st, "slow")
        assert accepted == n and pushes == n, "%d examples in %d pushes" % (accepted, pushes)
        assert sorted(arrivals) == list(range(n)), sorted(arrivals)
        # Example k is made 50 ms after example k-1: it arrives then, give or take the
        # machine's load (a loaded 2-core machine delays a wake-up by tens of ms), never a chunk
        # later (held for the byte budget, all 20 would arrive together, 0.95 s off).
        late = [(k, arrivals[k] - arrivals[0] - 0.05 * k) for k in range(n)]
        worst = max(abs(d) for _, d in late)
        assert worst < 0.25, "arrivals off their making by up to %.3f s: %r" % (worst, late)


def test_examples_of_moderate_cost_wait_at_most_the_time_bound():
    # 2 ms per example against a 5 ms bound: a chunk closes after its 3rd example at the
    # latest (each sleep lasts at least 2 ms), never at the byte budget (5957 examples).
    with Cluster() as c:
        c.producer("--delay", "0.002:0.002", "--max-examples", "300", name="mid")
        with stoker.Client(c.url, batch_size=16, stall_timeout=4) as client:
            got = 0
            try:
                for b in client.batches():
                    got += b.count
            except stoker.SupplyEnded:
                pass
            st = client.status()
        accepted, pushes = producer_counts(st, "mid")
        assert got == 300 and accepted == 300, (got, accepted)
        assert accepted / pushes <= 3, "%d examples in %d pushes" % (accepted, pushes)
        # --chunk-ms moves the bound: 200 ms holds up to 100 such examples (more than 3 unless
        # each takes over 50 ms).
    with Cluster() as c:
        c.producer("--delay", "0.002:0.002", "--max-examples", "300", "--chunk-ms", "200",
                   name="mid200")
        with stoker.Client(c.url, batch_size=16, stall_timeout=4) as client:
            try:
                for b in client.batches():
                    pass
            except stoker.SupplyEnded:
                pass
            st = client.status()
        accepted, pushes = producer_counts(st, "mid200")
        assert accepted == 300 and 3 < accepted / pushes <= 100, (accepted, pushes)


def test_chunk_bytes_and_a_fixed_chunk_set_the_size():
    # Queues that hold everything: no push waits for room, so none is sent twice.
    with Cluster("--queue-depth", "100000") as c:
        # 4400 bytes: 100 examples of 44 bytes per push; --chunk 7: 7.
        c.producer("--delay", "0:0", "--max-examples", "1000", "--chunk-bytes", "4400",
                   name="bytes")
        c.producer("--delay", "0:0", "--max-examples", "700", "--chunk", "7", name="fixed")
        c.wait_producers(2)  # both known before one's end could end the supply
        with stoker.Client(c.url, batch_size=64, stall_timeout=4) as client:
            got = 0
            try:
                for b in client.batches():
                    got += b.count
            except stoker.SupplyEnded:
                pass
            st = client.status()
        assert got == 1700, got
        accepted, pushes = producer_counts(st, "bytes")
        # 100 a push (a chunk takes ~30 us to fill: a stall of 5 ms on a loaded machine may
        # close one early, never make one larger).
        assert accepted == 1000 and 10 <= pushes <= 20, (accepted, pushes)
        assert producer_counts(st, "fixed") == (700, 100), producer_counts(st, "fixed")


def test_a_fixed_chunk_larger_than_the_broker_takes_is_a_clear_error():
    with Cluster("--queue-depth", "64") as c:
        p = c.producer("--delay", "0:0", "--chunk", "1024", name="big",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        (code, _, err), = reap([p], 10)
        assert code == 1, (code, err)
        assert "chunks of 1024 examples (--chunk) are more than the broker takes in one push, " \
               "64" in err, err
        # The default producer fits its chunks to the same broker.
        c.producer("--delay", "0:0", "--max-examples", "2000", name="auto")
        c.wait_producers(2)  # "big" is lost already: the supply is "auto"
        with stoker.Client(c.url, batch_size=64, stall_timeout=4) as client:
            got = 0
            try:
                for b in client.batches():
                    got += b.count
            except stoker.SupplyEnded:
                pass
            st = client.status()
        accepted, pushes = producer_counts(st, "auto")
        assert got == 2000 and accepted == 2000, (got, accepted)
        assert pushes >= 2000 / 64, "%d examples in %d pushes" % (accepted, pushes)


def test_bad_chunk_values_are_usage_errors():
    cases = [
        (["--chunk", "0"], "--chunk '0': expected a number of examples in 1..1048576, or auto"),
        (["--chunk", "lots"], "--chunk 'lots': expected a number of examples"),
        (["--chunk", "2000000"], "--chunk '2000000'"),
        (["--chunk-bytes", "0"], "--chunk-bytes '0': expected bytes"),
        (["--chunk-bytes", "-5"], "--chunk-bytes '-5'"),
        (["--chunk-ms", "0"], "--chunk-ms '0': expected a number"),
        (["--chunk-ms", "soon"], "--chunk-ms 'soon'"),
        (["--chunk", "3", "--chunk-ms", "2"], "--chunk-bytes and --chunk-ms size chunks with "
                                             "--chunk auto"),
        (["--chunk", "3", "--chunk-bytes", "4096"], "--chunk 3 fixes the count"),
        (["--chunk", "3", "--chunk-batch-bytes", "4096"], "--chunk-batch-bytes sizes chunks "
                                                          "with --chunk auto"),
        (["--chunk-batch-bytes", "-1"], "--chunk-batch-bytes '-1'"),
    ]
    for args, words in cases:
        r = subprocess.run([PRODUCER, "--broker", "ipc:///nonexistent/stoker.ipc"] + args,
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert words in r.stderr, (args, r.stderr)
    r = subprocess.run([PRODUCER, "--help"], capture_output=True, text=True, timeout=10)
    assert "--chunk N|auto" in r.stdout and "(default auto)" in r.stdout, r.stdout
    assert "(default 262144)" in r.stdout and "(default 5)" in r.stdout, r.stdout
    assert "--chunk-batch-bytes B" in r.stdout and "(default 8388608)" in r.stdout, r.stdout


run(globals())
