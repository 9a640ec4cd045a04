"""Variable-length fields on real processes (docs/schema.md): examples of
tokens:int32[?<=64],points:float32[?,3],label:int64 made by tests/lib/var_producer.c (every byte
follows from the label) travel over the socket and through the broker's shared memory, to
stoker-pull (text and raw, each value after its length), across a broker restart with
retention, as a dataset in epochs, to a group of two ranks and to a committing consumer:
byte for byte, each example exactly once. A value over its bound is refused at the producer
(counted); the MLP trainer refuses a variable input naming it (exit 2)."""

import os
import struct
import subprocess
import sys

from helpers import PULL, BROKER, Cluster, reap, require, run

np = require("numpy")
import stoker  # noqa: E402
from var_data import expected, n_tokens, var_producer  # noqa: E402

TRAINER = os.environ.get("STOKER_TRAINER_BIN", "build/trainer/stoker-trainer")
SCHEMA = "tokens:int32[?<=64],points:float32[?,3],label:int64[1]"


def check(batch, seen, key=None):
    """Checks every example of batch byte for byte; adds its key (default: its identity) to
    seen, failing on one seen before."""
    assert batch["tokens"].values.dtype == np.int32 and batch["points"].values.shape[1:] == (3,)
    tokens, points = batch["tokens"], batch["points"]
    assert len(tokens) == len(points) == batch.count
    assert tokens.offsets[0] == 0 and tokens.offsets[-1] == len(tokens.values)
    ids = list(zip(*batch.identities())) if key is None else key(batch)
    for i in range(batch.count):
        seq = int(batch["label"][i, 0])
        want_t, want_p = expected(seq)
        assert tokens[i].tobytes() == want_t, "example %d: tokens differ" % seq
        assert points[i].tobytes() == want_p, "example %d: points differ" % seq
        assert int(tokens.lengths()[i]) == n_tokens(seq)
        k = tuple(int(x) for x in ids[i])
        assert k not in seen, "example %r delivered twice" % (k,)
        seen[k] = seq


def drain(client, seen, batch_size=16, key=None):
    try:
        while True:
            b = client.next_batch(batch_size)
            check(b, seen, key)
            b.release()
    except stoker.SupplyEnded:
        pass


def test_socket_and_shared_memory_carry_every_value_exactly_once():
    for shm, path in (("0", "socket"), ("1", "shm")):
        os.environ["STOKER_SHM"] = shm
        try:
            with Cluster() as c:
                a = var_producer(c, "a", 300, "--chunk", "7")
                b = var_producer(c, "b", 200)  # chunks sized by bytes and time
                c.wait_producers(2)  # the supply ends only when both are done
                seen = {}
                with stoker.Client(c.url, stall_timeout=10) as client:
                    drain(client, seen)
                    assert client.delivery == path, client.delivery
                    assert client.fields[0] == stoker.Field("tokens", "int32", (None,), 64)
                    assert client.fields[1].shape == (None, 3)
                for p in (a, b):
                    out, err = p.communicate(timeout=10)
                    assert p.returncode == 0, err
                labels = sorted(seen.values())
                assert labels == sorted(list(range(300)) + list(range(200))), len(labels)
                st = stoker.status(c.url)["counters"]
                assert st["produced"] == st["acknowledged"] == 500, st
                assert st["queued_bytes"] == 0, st
        finally:
            del os.environ["STOKER_SHM"]


def test_the_broker_counts_real_bytes():
    with Cluster() as c:
        p = var_producer(c, "a", 40, "--chunk", "40")
        p.communicate(timeout=10)
        want = sum(len(expected(q)[0]) + len(expected(q)[1]) + 8 + 8 + 8 for q in range(40))
        assert stoker.status(c.url)["counters"]["queued_bytes"] == want


def test_stoker_pull_says_each_length_in_text_and_raw():
    with Cluster() as c:
        var_producer(c, "a", 30, "--chunk", "4")
        out = subprocess.run([PULL, "--broker", c.url, "--batch-size", "8", "--max-examples",
                              "15"], capture_output=True, timeout=30)
        assert out.returncode == 0, out.stderr
        rows = [line.split() for line in out.stdout.decode().splitlines()]
        raw = subprocess.run([PULL, "--broker", c.url, "--format", "raw", "--batch-size", "8",
                              "--max-examples", "15"], capture_output=True, timeout=30)
        assert raw.returncode == 0, raw.stderr
    got = {}
    for r in rows:  # n, n tokens, m, 3 m floats, label
        n = int(r[0])
        toks = [int(x) for x in r[1:1 + n]]
        m = int(r[1 + n])
        pts = [float(x) for x in r[2 + n:2 + n + 3 * m]]
        assert len(r) == 3 + n + 3 * m, r
        seq = int(r[-1])
        got[seq] = (np.array(toks, "<i4").tobytes(), np.array(pts, "<f4").tobytes())
    data, at = raw.stdout, 0
    while at < len(data):
        (n,) = struct.unpack_from("<I", data, at)
        toks = data[at + 4:at + 4 + 4 * n]
        at += 4 + 4 * n
        (m,) = struct.unpack_from("<I", data, at)
        pts = data[at + 4:at + 4 + 12 * m]
        at += 4 + 12 * m
        (seq,) = struct.unpack_from("<q", data, at)
        at += 8
        got[seq] = (toks, pts)
    assert sorted(got) == list(range(30))
    for seq, v in got.items():
        assert v == expected(seq), seq


def test_a_value_over_its_bound_is_refused_at_the_producer():
    with Cluster() as c:
        p = var_producer(c, "a", 200, "--chunk", "9", "--overflow-every", "4")
        seen = {}
        with stoker.Client(c.url, stall_timeout=5) as client:
            drain(client, seen)
        assert sorted(seen.values()) == list(range(200))
        out, err = p.communicate(timeout=20)
        assert p.returncode == 0, err
        counts = dict(line.split() for line in out.splitlines())
        assert int(counts["examples"]) == 200
        assert int(counts["refused"]) > 10, out
        assert "value-refused: field 'tokens' of example" in err and "length 65, over its " \
            "bound 64" in err, err[-2000:]


def test_retention_pushes_them_again_after_a_broker_restart():
    with Cluster() as c:
        p = var_producer(c, "a", 400, "--chunk", "5", "--retain", "1000", "--linger-ms", "30000",
                         "--delay-us", "2000")
        seen = {}
        with stoker.Client(c.url, stall_timeout=15) as client:
            while len(seen) < 100:
                b = client.next_batch(10)
                check(b, seen)
                b.release()
            c.broker.kill()
            c.broker.wait()
            c.broker = subprocess.Popen([BROKER, "--listen", c.url, "--log-level", "error"],
                                        stdout=subprocess.DEVNULL)
            drain(client, seen, 10)
        out, err = p.communicate(timeout=40)
        assert p.returncode == 0, err[-3000:]
        assert sorted(seen.values()) == list(range(400)), "%d examples" % len(seen)


def test_a_dataset_gives_every_item_once_per_epoch():
    n = 90
    with Cluster("--dataset-size", str(n), "--epochs", "2") as c:
        var_producer(c, "a", 0, "--items", n, "--chunk", "4")
        var_producer(c, "b", 0, "--items", n)
        c.wait_producers(2)
        per_epoch = {}
        with stoker.Client(c.url, stall_timeout=10) as client:
            for epoch in client.epochs(2, batch_size=8):
                for batch in epoch:
                    seen = {}
                    check(batch, seen, key=lambda b: list(zip(*b.epoch_indices())))
                    for (e, i), seq in seen.items():
                        assert i == seq, "item %d carries label %d" % (i, seq)
                        per_epoch.setdefault(e, []).append(i)
        assert sorted(per_epoch) == [0, 1]
        for e, items in per_epoch.items():
            assert sorted(items) == list(range(n)), (e, len(items))


RANK = r'''
import json, sys, stoker
url, rank, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
got = []
with stoker.Client(url, group="g", rank=rank, world_size=2, stall_timeout=15) as c:
    try:
        for b in c.batches(6):
            t = b["tokens"]
            got += [[int(s), int(q), int(l), t[i].tobytes().hex(), b["points"][i].tobytes().hex()]
                    for i, (s, q, l) in enumerate(zip(*b.identities(), b["label"][:, 0]))]
    except stoker.SupplyEnded:
        pass
json.dump(got, open(out, "w"))
'''


def test_a_group_of_two_ranks_shares_them_exactly_once():
    import json
    with Cluster() as c:
        var_producer(c, "a", 150, "--chunk", "7")
        var_producer(c, "b", 150)
        c.wait_producers(2)
        outs = [os.path.join(c.dir, "r%d.json" % r) for r in range(2)]
        ranks = [subprocess.Popen([sys.executable, "-c", RANK, c.url, str(r), outs[r]],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        for rc, out, err in reap(ranks, 60):
            assert rc == 0, err[-3000:]
        recs = [json.load(open(o)) for o in outs]
        assert len(recs[0]) == len(recs[1]), "ranks got unequal work"
        ids = [(s, q) for rec in recs for s, q, _, _, _ in rec]
        assert len(ids) == len(set(ids)), "delivered twice"
        for rec in recs:
            for _, _, seq, t, p in rec:
                assert (bytes.fromhex(t), bytes.fromhex(p)) == expected(seq), seq
        leftover = 300 - len(ids)
        assert 0 <= leftover < 12, leftover


def test_a_committing_consumer_gets_them_exactly_once():
    with Cluster() as c:
        var_producer(c, "a", 120, "--chunk", "6")
        seen = {}
        with stoker.Client(c.url, stall_timeout=5, commit=True) as client:
            try:
                while True:
                    b = client.next_batch(10)
                    check(b, seen)
                    b.release()
                    if len(seen) % 40 == 0:
                        client.commit()
            except stoker.SupplyEnded:
                pass
            client.commit()
        assert sorted(seen.values()) == list(range(120))


def test_the_mlp_trainer_refuses_a_variable_input_naming_it():
    with Cluster() as c:
        var_producer(c, "a", 50)
        t = subprocess.run([TRAINER, "--broker", c.url, "--input", "tokens", "--target", "label",
                            "--classes", "4", "--stall-timeout", "5"], capture_output=True,
                           text=True, timeout=30)
        assert t.returncode == 2, (t.returncode, t.stderr[-2000:])
        assert "'tokens'" in t.stderr and "variable length" in t.stderr, t.stderr[-2000:]


run(globals())
