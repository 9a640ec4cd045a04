"""Shared memory (docs/design.md, "Shared memory"): a consumer on the broker's host gets its
batches in the broker's arena, read-only; the same examples as over the socket; an array the user
holds is never overwritten however often the arena wraps; a SIGKILLed consumer's regions come
back; STOKER_SHM=0 and --shm-bytes 0 keep the socket path; a full arena falls back to bytes.
Large pushes from producers on other hosts (over tcp) are read into the arena, and a batch that is
one push's chunk is sent from where it lies: the same examples, arrays held stay as they were,
and a killed consumer's batches go to the next one intact."""

import faulthandler
import os
import signal
import socket
import subprocess
import sys
import time

from helpers import Cluster, require, run

np = require("numpy")
import stoker  # noqa: E402

SCHEMA_ARGS = ("--delay", "0:0", "--chunk", "16", "--seed", "7")


def collect(url, n, env_shm):
    """{(session-less) (producer name's seq): bytes of every field} for n examples."""
    old = os.environ.get("STOKER_SHM")
    os.environ["STOKER_SHM"] = env_shm
    try:
        got, paths = {}, set()
        with stoker.Client(url, batch_size=8, stall_timeout=10) as c:
            for b in c.batches():
                paths.add(c.delivery)
                if len(got) == 0:
                    collect.status = stoker.status(url)
                _, seqs = b.identities()
                for i, q in enumerate(seqs):
                    got[int(q)] = b"".join(b[k][i].tobytes() for k in sorted(b))
                if len(got) >= n:
                    break
        return got, paths
    finally:
        if old is None:
            del os.environ["STOKER_SHM"]
        else:
            os.environ["STOKER_SHM"] = old


def test_local_consumer_gets_the_same_examples_through_shared_memory():
    results = {}
    for shm in ("1", "0"):
        with Cluster() as c:
            c.producer(*SCHEMA_ARGS, "--max-examples", "400", name="fixed")
            results[shm] = collect(c.url, 400, shm)
            if shm == "1":
                results["status"] = collect.status
    (a, pa), (b, pb) = results["1"], results["0"]
    assert results["status"]["trainers_shm"] == 1, results["status"]
    assert results["status"]["counters"]["delivered_shm"] >= 8, results["status"]
    assert pa == {"shm"}, pa
    assert pb == {"socket"}, pb
    assert a == b and len(a) == 400


def test_delivery_is_none_until_the_first_batch_then_the_path_taken():
    # Before its first batch a client has used neither path: delivery says None, not "socket".
    # After it, the path that batch came by; after close(), what it was at close.
    with Cluster() as c:
        c.producer(*SCHEMA_ARGS)
        assert stoker.Client(c.url).delivery is None  # not connected yet
        for env_shm, path in (("1", "shm"), ("0", "socket")):
            old = os.environ.get("STOKER_SHM")
            os.environ["STOKER_SHM"] = env_shm
            try:
                cl = stoker.Client(c.url, batch_size=8, stall_timeout=10)  # connects now
            finally:
                if old is None:
                    del os.environ["STOKER_SHM"]
                else:
                    os.environ["STOKER_SHM"] = old
            try:
                assert cl.delivery is None, (env_shm, cl.delivery)
                b = cl.next_batch()
                assert cl.delivery == path and b.shared == (path == "shm"), (env_shm, cl.delivery)
                b.release()
            finally:
                cl.close()
            assert cl.delivery == path, (env_shm, cl.delivery)


def test_broker_without_shared_memory_serves_bytes():
    with Cluster("--shm-bytes", "0") as c:
        c.producer(*SCHEMA_ARGS, "--max-examples", "64")
        got, paths = collect(c.url, 64, "1")
        assert paths == {"socket"} and len(got) == 64


def test_socket_and_shm_consumers_on_one_broker_are_both_exact():
    with Cluster() as c:
        c.producer(*SCHEMA_ARGS, "--max-examples", "480", name="fixed")
        os.environ["STOKER_SHM"] = "0"
        try:
            sock = stoker.Client(c.url, batch_size=8, stall_timeout=10)
        finally:
            del os.environ["STOKER_SHM"]
        shm = stoker.Client(c.url, batch_size=8, stall_timeout=10)
        seen, kinds, ended = {}, {}, set()
        try:
            for turn in range(1000):
                cl = (sock, shm)[turn % 2]
                if cl in ended:
                    continue
                try:
                    b = cl.next_batch()
                except stoker.SupplyEnded:  # the other one may still hold prefetched batches
                    ended.add(cl)
                    if len(ended) == 2:
                        break
                    continue
                kinds.setdefault(cl.delivery, 0)
                kinds[cl.delivery] += 1
                assert b.shared == (cl is shm)
                _, seqs = b.identities()
                for i, q in enumerate(seqs):
                    assert int(q) not in seen
                    seen[int(q)] = b["input"][i].tobytes()
                b.release()
                if len(seen) == 480:
                    break
        finally:
            sock.close()
            shm.close()
        assert sorted(seen) == list(range(480))
        assert kinds.get("shm", 0) > 0 and kinds.get("socket", 0) > 0, kinds
    # The same examples as a socket-only run.
    with Cluster() as c:
        c.producer(*SCHEMA_ARGS, "--max-examples", "480", name="fixed")
        ref, _ = collect(c.url, 480, "0")
    assert {q: v[:40] for q, v in ref.items()} == seen


def test_with_a_token_shared_memory_comes_after_the_token():
    import tempfile
    import shutil
    from helpers import BROKER, PRODUCER
    d = tempfile.mkdtemp(prefix="stoker-py-")
    path, url = os.path.join(d, "token"), "ipc://" + os.path.join(d, "b.ipc")
    with open(path, "w") as f:
        f.write("s3cret-token\n")
    procs = [subprocess.Popen([BROKER, "--listen", url, "--token-file", path, "--log-level",
                               "error"], stdout=subprocess.DEVNULL)]
    try:
        procs.append(subprocess.Popen([PRODUCER, "--broker", url, "--token-file", path,
                                       "--log-level", "error", *SCHEMA_ARGS]))
        try:
            stoker.Client(url, batch_size=8, stall_timeout=2).next_batch()
            raise AssertionError("a client without the token was served")
        except stoker.StokerError as e:
            assert "token" in str(e) or "UNAUTH" in str(e).upper(), e
        with stoker.Client(url, token_file=path, batch_size=8, stall_timeout=10) as cl:
            b = cl.next_batch()
            assert b.shared and cl.delivery == "shm"
            b.release()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


def test_held_array_is_never_overwritten_across_wraparounds():
    # 8 KiB of arena, batches of 8 * 44 bytes: it wraps around dozens of times below.
    with Cluster("--shm-bytes", "8192") as c:
        c.producer(*SCHEMA_ARGS)
        with stoker.Client(c.url, batch_size=8, stall_timeout=10) as cl:
            held = []
            shared = 0
            for n, b in enumerate(cl.batches(max_batches=3000)):
                shared += b.shared
                if b.shared and n % 500 == 0:  # keep some arrays long after their batch
                    arr = b["input"]
                    assert not arr.flags.writeable
                    held.append((arr, arr.copy()))
            assert shared > 2500, shared
            assert len(held) >= 5
            for arr, copy in held:
                assert np.array_equal(arr, copy)


def test_full_arena_falls_back_to_bytes_and_keeps_held_batches():
    with Cluster("--shm-bytes", "4096") as c:
        c.producer(*SCHEMA_ARGS)
        with stoker.Client(c.url, batch_size=8, stall_timeout=10) as cl:
            kept = []
            for b in cl.batches(max_batches=40):
                kept.append((b, b["input"], b["input"].copy()))
            flags = [b.shared for b, _, _ in kept]
            assert any(flags) and not all(flags), flags  # 4 KiB holds only a few batches
            for _, arr, copy in kept:
                assert np.array_equal(arr, copy)


CHILD = r"""
import ctypes, sys, time
import stoker
c = stoker.Client(sys.argv[1], batch_size=8, stall_timeout=10)
held = [c.next_batch() for _ in range(int(sys.argv[2]))]
assert all(b.shared for b in held), [b.shared for b in held]
print("holding", flush=True)
if sys.argv[3] == "write":
    ctypes.memset(held[0]["input"].ctypes.data, 0, 4)  # the mapping is read-only: SIGSEGV
    print("wrote", flush=True)
time.sleep(60)
"""


def child(url, n, what):
    env = dict(os.environ)
    if "ASAN_OPTIONS" in env:  # under AddressSanitizer: let the fault be a plain SIGSEGV
        env["ASAN_OPTIONS"] += ":handle_segv=0"
    return subprocess.Popen([sys.executable, "-c", CHILD, url, str(n), what],
                            stdout=subprocess.PIPE, env=env)


def test_a_write_into_the_mapping_faults():
    with Cluster() as c:
        c.producer(*SCHEMA_ARGS)
        p = child(c.url, 1, "write")
        try:
            assert p.stdout.readline() == b"holding\n"
            assert p.wait(timeout=20) == -signal.SIGSEGV
            assert p.stdout.read() == b""
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


def held_then_killed(url, n):
    """A consumer process that holds n batches in shared memory, SIGKILLed once it does."""
    p = child(url, n, "hold")
    try:
        assert p.stdout.readline() == b"holding\n"
    finally:
        p.kill()
        p.wait()


def test_killed_consumer_regions_come_back_after_its_leases():
    # The child holds every region the 4 KiB arena has; after its SIGKILL its leases are
    # redelivered and the next consumer gets batches in shared memory again.
    with Cluster("--shm-bytes", "4096") as c:
        c.producer(*SCHEMA_ARGS)
        held_then_killed(c.url, 6)
        deadline = time.monotonic() + 10
        with stoker.Client(c.url, batch_size=8, stall_timeout=10) as cl:
            while True:
                b = cl.next_batch()
                shared = b.shared
                b.release()
                if shared:
                    break
                assert time.monotonic() < deadline, "the dead consumer's regions never came back"
        st = stoker.status(c.url)
        assert st["counters"]["redelivered"] >= 6 * 8, st["counters"]
    # Nothing left behind: the arena is a memfd, its socket abstract.
    assert not [f for f in os.listdir("/dev/shm") if "stoker" in f]


def test_group_ranks_take_their_steps_through_shared_memory():
    # Two ranks of one data-parallel group on a small arena (8 KiB, about 20 regions of a batch
    # of 8): every step's batch comes through shared memory, the arena wraps around many times
    # (regions of acknowledged steps come back) and the group's rules hold: equal steps, disjoint
    # examples, all of them delivered.
    with Cluster("--shm-bytes", "8192") as c:
        c.producer(*SCHEMA_ARGS, "--max-examples", "1600", name="fixed")
        ranks = [stoker.Client(c.url, group="g", rank=r, world_size=2, batch_size=8,
                               stall_timeout=10) for r in range(2)]
        steps, shared, seen, ended, paths = [0, 0], [0, 0], set(), set(), set()
        try:
            for turn in range(1000):
                r = turn % 2
                if r in ended:
                    continue
                try:
                    b = ranks[r].next_batch()
                except stoker.SupplyEnded:
                    ended.add(r)
                    if len(ended) == 2:
                        break
                    continue
                steps[r] += 1
                shared[r] += b.shared
                paths.add(ranks[r].delivery)
                _, seqs = b.identities()
                for q in seqs:
                    assert int(q) not in seen
                    seen.add(int(q))
                b.release()
            st = stoker.status(c.url)
        finally:
            for cl in ranks:
                cl.close()
        assert ended == {0, 1}
        assert steps == [100, 100], steps
        assert sorted(seen) == list(range(1600))
        assert min(shared) >= 95, shared
        assert paths == {"shm"}, paths
        assert st["counters"]["delivered_shm"] >= 1520, st["counters"]


RANK_CHILD = r"""
import sys, time
import stoker
c = stoker.Client(sys.argv[1], group="g", rank=1, world_size=2, batch_size=8, stall_timeout=10)
held = [c.next_batch() for _ in range(3)]
assert all(b.shared for b in held), [b.shared for b in held]
print("holding", flush=True)
time.sleep(60)
"""


def test_killed_rank_regions_come_back_after_the_group_broke():
    # 5 KiB: 13 regions. The SIGKILLed rank held 3 batches in the arena (and prefetched more);
    # the other rank gets GroupBroken; then one consumer holds 8 batches at once, all in shared
    # memory, which needs the dead rank's regions back. A hang fails the test with every
    # thread's traceback instead of waiting for the suite's timeout.
    faulthandler.dump_traceback_later(90, exit=True)
    try:
        killed_rank_regions()
    finally:
        faulthandler.cancel_dump_traceback_later()


def killed_rank_regions():
    with Cluster("--shm-bytes", "5120", "--trainer-timeout", "2") as c:
        c.producer(*SCHEMA_ARGS)
        p = subprocess.Popen([sys.executable, "-c", RANK_CHILD, c.url], stdout=subprocess.PIPE)
        rank0 = stoker.Client(c.url, group="g", rank=0, world_size=2, batch_size=8,
                              stall_timeout=10)
        try:
            b = rank0.next_batch()
            assert p.stdout.readline() == b"holding\n"
            b.release()
            del b
            p.kill()
            p.wait()
            deadline = time.monotonic() + 10
            try:
                while time.monotonic() < deadline:
                    rank0.next_batch().release()
                raise AssertionError("rank 0 never heard that its group broke")
            except stoker.GroupBroken as e:
                assert "rank 1" in str(e), e
        finally:
            rank0.close()
            if p.poll() is None:
                p.kill()
                p.wait()
        with stoker.Client(c.url, batch_size=8, stall_timeout=10) as cl:
            held = [cl.next_batch() for _ in range(8)]
            assert all(b.shared for b in held), [b.shared for b in held]
        st = stoker.status(c.url)
        assert st["counters"]["redelivered"] >= 3 * 8, st["counters"]




# 32 KiB images and a label, pushed 8 at a time (256 KiB and more a push: the intake reads it into
# the arena) by a producer that pushes bytes over tcp as one on another host does. The bench's
# producer fills example seq's image with seq's low byte, the whole seq in front, and its label
# with seq: every byte a consumer gets can be checked.
BENCH_PRODUCER = os.environ.get("STOKER_BENCH_PRODUCER_BIN", "build/bench/stoker-bench-producer")
LARGE_SCHEMA = "image:uint8[64,64,8],label:int64"


def tcp_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return "tcp://127.0.0.1:%d" % s.getsockname()[1]


def remote_producer(c, tcp, *args):
    p = subprocess.Popen([BENCH_PRODUCER, "--broker", tcp, "--name", "far", "--schema",
                          LARGE_SCHEMA, "--chunk", "8", "--fill", "all", "--log-level", "error",
                          *args], env={**os.environ, "STOKER_SHM": "0"})
    c.producers.append(p)
    return p


def check_batch(b, seen):
    """Every example of b as the producer made it, none seen before (added to seen)."""
    _, seqs = b.identities()
    for i, q in enumerate(seqs):
        q = int(q)
        assert q not in seen, q
        seen.add(q)
        img = b["image"][i].reshape(-1)
        assert img[:8].tobytes() == q.to_bytes(8, "little"), (q, img[:8])
        assert (img[8:] == (q & 0xFF)).all(), q
        assert int(b["label"][i]) == q, (q, b["label"][i])


def test_large_pushes_over_tcp_are_sent_from_where_they_were_read():
    tcp = tcp_url()
    with Cluster("--listen", tcp) as c:
        remote_producer(c, tcp, "--max-examples", "400")
        seen, paths = set(), set()
        with stoker.Client(c.url, batch_size=8, stall_timeout=10) as cl:
            for b in cl.batches():
                paths.add(cl.delivery)
                check_batch(b, seen)
                if len(seen) >= 400:
                    break
        counters = stoker.status(c.url)["counters"]
    assert paths == {"shm"} and len(seen) == 400, (paths, len(seen))
    # Every batch of 8 is one push's chunk: sent from where it was read (pushes that came
    # before the consumer mapped the arena are copied).
    assert counters["delivered_in_place"] >= 300, counters
    assert counters["delivered_in_place"] <= counters["delivered_shm"], counters


def test_without_shared_memory_large_pushes_go_as_bytes():
    tcp = tcp_url()
    with Cluster("--listen", tcp) as c:
        remote_producer(c, tcp, "--max-examples", "200")
        seen = set()
        os.environ["STOKER_SHM"] = "0"
        try:
            with stoker.Client(c.url, batch_size=8, stall_timeout=10) as cl:
                for b in cl.batches():
                    assert not b.shared
                    check_batch(b, seen)
                    if len(seen) >= 200:
                        break
        finally:
            del os.environ["STOKER_SHM"]
        assert stoker.status(c.url)["counters"]["delivered_in_place"] == 0


def test_batches_sent_in_place_stay_as_they_were_while_held():
    # 16 MiB of arena, three quarters of it for pushes read into it (46 of 264 KiB): reused a dozen times
    # and more below (105 MB pass) while some batches' arrays are held. Which pushes find room
    # there depends on the timing; many do.
    tcp = tcp_url()
    with Cluster("--listen", tcp, "--shm-bytes", str(16 << 20)) as c:
        remote_producer(c, tcp)
        with stoker.Client(c.url, batch_size=8, stall_timeout=10) as cl:
            held, seen = [], set()
            for n, b in enumerate(cl.batches(max_batches=400)):
                check_batch(b, seen)
                if b.shared and n % 40 == 0:
                    held.append((b["image"], b["image"].copy(), b["label"], b["label"].copy()))
            st = stoker.status(c.url)
            assert st["counters"]["delivered_in_place"] >= 100 * 8, st["counters"]
            assert len(held) >= 5
            for img, img_copy, label, label_copy in held:
                assert not img.flags.writeable
                assert np.array_equal(img, img_copy) and np.array_equal(label, label_copy)


def test_a_killed_consumers_in_place_batches_go_to_the_next_one_intact():
    tcp = tcp_url()
    with Cluster("--listen", tcp) as c:
        remote_producer(c, tcp, "--max-examples", "400")
        held_then_killed(c.url, 6)
        seen = set()
        with stoker.Client(c.url, batch_size=8, stall_timeout=10) as cl:
            for b in cl.batches():
                assert b.shared
                check_batch(b, seen)
                if len(seen) >= 400:
                    break
        st = stoker.status(c.url)
    assert len(seen) == 400  # the dead one's 48 among them, each once
    assert st["counters"]["redelivered"] >= 6 * 8, st["counters"]
    assert st["counters"]["delivered_in_place"] > 0, st["counters"]

run(globals())
