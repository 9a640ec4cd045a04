"""Batches made by tokens (docs/schema.md, "Batching by tokens"): a token budget (max_tokens),
length buckets and packed rows (pack=L, whole sequences or split across rows), chosen by the
client and made by a real broker from real synthetic producers' log-normal token sequences.
Every test also checks that each example arrives exactly once, and /status's padding figures
against what the batches themselves pad. A group's ranks get the same rows each step; bad
combinations are refused with a message naming them."""

import subprocess
import threading

from helpers import PULL, Cluster, require, run

np = require("numpy")
import stoker  # noqa: E402
import stoker.ragged  # noqa: E402


def start(c, n, lengths="lognormal:64:200", producers=2):
    ps = [c.producer("--workload", "tokens", "--lengths", lengths, "--max-examples", str(n),
                     "--delay", "0:0", name="t%d" % k, stderr=subprocess.PIPE, text=True)
          for k in range(producers)]
    # Every producer known before anyone pulls: under load the second one may say hello only
    # after the first finished, and the supply would rightly end with it.
    c.wait_producers(producers)
    return ps


def drain(c, ps, client_kw, batch_size=None, group=None):
    """(batches as lists of lengths, {identity}) pulled until the supply ends."""
    batches, seen = [], set()
    with stoker.Client(c.url, stall_timeout=10, **client_kw) as client:
        try:
            while True:
                b = client.next_batch(batch_size)
                lengths = b["tokens"].lengths
                lengths = [int(x) for x in (lengths() if callable(lengths) else lengths)]
                for key in zip(*b.identities()):
                    key = (int(key[0]), int(key[1]))
                    assert key not in seen, "example %r delivered twice" % (key,)
                    seen.add(key)
                batches.append((lengths, b))
                if client_kw.get("pack"):
                    batches[-1] = (lengths, b["tokens"].pack(
                        row=client_kw["pack"], whole=not client_kw.get("split", True),
                        rows=client.batch_size or 4))
                else:
                    batches[-1] = (lengths, None)
                b.release()
        except stoker.SupplyEnded:
            pass
    for p in ps:
        _, err = p.communicate(timeout=10)
        assert p.returncode == 0, err
    st = stoker.status(c.url)
    assert st["counters"]["produced"] == st["counters"]["acknowledged"] == len(seen), st
    return batches, seen, st


def padding_of(batches):
    real = sum(sum(x) for x, _ in batches)
    padded = sum(len(x) * max(x) for x, _ in batches if x)
    return (padded - real) / padded


def test_token_budget_fills_without_passing_it():
    with Cluster() as c:
        ps = start(c, 1500)
        batches, seen, st = drain(c, ps, {"max_tokens": 1024})
    assert len(seen) == 3000
    for lengths, _ in batches[:-1]:
        assert len(lengths) * max(lengths) <= 1024, lengths  # padded, never past the budget
    sizes = [len(x) for x, _ in batches]
    # Log-normal lengths, mean 57 and cap 200: a budget of 1024 holds 5 to 50 of them; a count
    # fixed at the default 4 would not.
    assert np.mean(sizes) > 6, np.mean(sizes)
    fill = np.mean([len(x) * max(x) / 1024 for x, _ in batches[:-3]])
    assert fill > 0.6, fill
    consumer = [t for t in st["consumers"] if t.get("tokens")][0]
    assert consumer["tokens"] == sum(sum(x) for x, _ in batches), consumer
    assert abs(consumer["padding_fraction"] - padding_of(batches)) < 1e-3, consumer


def test_a_sequence_longer_than_the_budget_comes_alone():
    with Cluster() as c:
        ps = start(c, 300, lengths="uniform:50:300", producers=1)
        batches, seen, _ = drain(c, ps, {"max_tokens": 200})
    assert len(seen) == 300  # none dropped
    long = [x for x, _ in batches if max(x) > 200]
    assert long and all(len(x) == 1 for x in long), long
    assert sum(1 for x, _ in batches for n in x if n > 200) == len(long)


def test_buckets_pad_far_less_than_count_batching():
    with Cluster() as c:
        ps = start(c, 3000)
        count, _, _ = drain(c, ps, {}, batch_size=32)
    with Cluster() as c:
        ps = start(c, 3000)
        bucketed, seen, st = drain(c, ps, {"buckets": True}, batch_size=32)
    assert len(seen) == 6000
    by_count, by_bucket = padding_of(count), padding_of(bucketed)
    print("padding: count %.3f, buckets %.3f" % (by_count, by_bucket))
    assert by_count > 0.3, by_count  # log-normal lengths padded to the longest of 32
    assert by_bucket < 0.1 and by_bucket < by_count / 4, (by_bucket, by_count)
    # Full batches to the end: the last sequences go together, not one by one.
    assert len(bucketed) <= 6000 // 32 + 2, [len(x) for x, _ in bucketed[-40:]]
    consumer = [t for t in st["consumers"] if t.get("tokens")][0]
    assert abs(consumer["padding_fraction"] - by_bucket) < 1e-3, consumer


def test_buckets_pad_little_when_producers_set_the_pace():
    # Producers slower than the consumer: the queues are nearly empty when a batch is asked
    # for, so buckets choose among a reserve of batches the broker keeps (docs/schema.md,
    # "Length buckets"). Without it, a batch was whatever 32 had arrived: padded as much as by
    # count (about 0.8 with these lengths; max_tokens about 0.5).
    for client_kw, batch_size, n in (({"buckets": True}, 32, 120),
                                     ({"buckets": True, "max_tokens": 16384}, None, 60)):
        with Cluster() as c:
            for k in range(2):
                c.producer("--workload", "tokens", "--lengths", "lognormal:200:2048", "--delay",
                           "0.002:0.002", name="s%d" % k)
            c.wait_producers(2)
            batches, seen = [], set()
            with stoker.Client(c.url, stall_timeout=10, **client_kw) as client:
                for b in client.batches(batch_size):
                    lengths = b["tokens"].lengths
                    lengths = [int(x) for x in (lengths() if callable(lengths) else lengths)]
                    for key in zip(*b.identities()):
                        key = (int(key[0]), int(key[1]))
                        assert key not in seen, "example %r delivered twice" % (key,)
                        seen.add(key)
                    batches.append((lengths, None))
                    b.release()
                    if len(batches) == n:
                        break
            queued = stoker.status(c.url)["counters"]
        steady = padding_of(batches[n // 6:])  # after the reserve filled
        print("%s: padding %.3f over %d batches; %s" % (client_kw, steady, n, queued))
        assert steady < 0.15, (client_kw, steady)
        if batch_size:
            assert all(len(x) == batch_size for x, _ in batches), [len(x) for x, _ in batches]


def next_fit_rows(lengths, row):
    rows, used = 0, 0
    for n in lengths:
        if rows and used + n <= row:
            used += n
        else:
            rows += -(-n // row) if n else 1
            used = n - (n - 1) // row * row if n else 0
    return rows


def check_packed(batches, row, rows, whole):
    for lengths, packed in batches:
        assert packed.input_ids.shape == (rows, row), packed.input_ids.shape
        assert sum(lengths) <= row * rows or len(lengths) == 1, lengths
        cu = packed.cu_seqlens
        assert cu[0] == 0 and cu[-1] == row * rows and (np.diff(cu) > 0).all()
        if whole:
            assert next_fit_rows(lengths, row) <= rows, (lengths, row, rows)


def test_consumers_with_buckets_beside_others_get_every_sequence_once():
    # With buckets the broker plans several batches from one sorted window and serves them to
    # the next pulls while nothing but appends changed the queues (server/broker/budget.c,
    # "planned ahead"). Two consumers with buckets (one by count, one by a budget: other
    # batchings), a third by count and a fourth with buckets that leaves holding three batches
    # unreleased (put back at its goodbye, redelivered) take from the same queues at once: each
    # take of one makes the others' plans stale, and every sequence must still come once.
    n, producers = 4000, 2
    with Cluster() as c:
        ps = start(c, n, lengths="lognormal:200:2048", producers=producers)
        seen, errors, lock = {}, [], threading.Lock()
        pads = {}

        def quit_holding(k=3):
            try:
                with stoker.Client(c.url, stall_timeout=10, buckets=True) as client:
                    held = [client.next_batch(32) for _ in range(k)]
                    assert all(len(b.identities()[0]) > 0 for b in held)
            except Exception as e:  # noqa: BLE001
                errors.append(("quitter", e))

        def consume(name, kw, batch_size):
            try:
                with stoker.Client(c.url, stall_timeout=10, **kw) as client:
                    real = slots = 0
                    try:
                        while True:
                            b = client.next_batch(batch_size)
                            lengths = b["tokens"].lengths
                            lengths = [int(x) for x in (lengths() if callable(lengths)
                                                        else lengths)]
                            real += sum(lengths)
                            slots += len(lengths) * max(lengths)
                            with lock:
                                for key in zip(*b.identities()):
                                    key = (int(key[0]), int(key[1]))
                                    assert key not in seen, "%r delivered to %s and %s" % (
                                        key, seen[key], name)
                                    seen[key] = name
                            b.release()
                    except stoker.SupplyEnded:
                        pass
                    pads[name] = 1 - real / slots if slots else 0.0
            except Exception as e:  # noqa: BLE001
                errors.append((name, e))

        ts = [threading.Thread(target=consume, args=a) for a in (
            ("buckets", {"buckets": True}, 32),
            ("budget+buckets", {"buckets": True, "max_tokens": 8192}, None),
            ("count", {}, 16))] + [threading.Thread(target=quit_holding)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert not errors, errors
        for p in ps:
            _, err = p.communicate(timeout=10)
            assert p.returncode == 0, err
        st = stoker.status(c.url)
    assert len(seen) == n * producers, len(seen)
    assert st["counters"]["produced"] == st["counters"]["acknowledged"] == n * producers, st
    assert {"buckets", "budget+buckets", "count"} <= set(seen.values()), set(seen.values())
    print("padding:", pads)
    assert pads["buckets"] < 0.15, pads


def test_packed_rows_are_full():
    row, rows = 256, 4
    with Cluster() as c:
        ps = start(c, 1500)
        batches, seen, st = drain(c, ps, {"pack": row}, batch_size=rows)
    assert len(seen) == 3000
    check_packed(batches, row, rows, False)
    real = sum(sum(x) for x, _ in batches[:-3])
    unused = sum(rows * row - sum(x) for x, _ in batches[:-3])
    print("packed: %d batches, %.4f of the rows unused" % (len(batches), unused / (real + unused)))
    assert unused / (real + unused) < 0.02, unused / (real + unused)  # best fit fills the gaps
    consumer = [t for t in st["consumers"] if t.get("tokens")][0]
    assert consumer["padding_fraction"] < 0.02, consumer


def test_packed_whole_sequences_fit_their_rows():
    row, rows = 256, 4
    with Cluster() as c:
        ps = start(c, 1000)
        batches, seen, _ = drain(c, ps, {"pack": row, "split": False}, batch_size=rows)
    assert len(seen) == 2000
    check_packed(batches, row, rows, True)  # pack(rows=4) raises if next-fit needed more rows
    for lengths, packed in batches:
        # No sequence split: every sequence (all shorter than a row here) is one segment.
        seg = [int(x) for x in np.diff(packed.cu_seqlens)]
        for n in lengths:
            assert n in seg, (n, seg)
            seg.remove(n)


def test_a_group_gets_the_same_rows_on_every_rank():
    row, rows, world = 128, 2, 2
    with Cluster() as c:
        ps = start(c, 1000)
        steps = [[] for _ in range(world)]
        seen = [set() for _ in range(world)]
        errors = []

        def rank(r):
            try:
                with stoker.Client(c.url, stall_timeout=10, group="g", rank=r, world_size=world,
                                   pack=row, batch_size=rows) as client:
                    try:
                        for b in client.batches():
                            p = stoker.ragged.pack(b["tokens"], row=row, rows=rows)
                            steps[r].append(p.input_ids.shape)
                            seen[r].update((int(a), int(s)) for a, s in zip(*b.identities()))
                    except stoker.SupplyEnded:
                        pass
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not errors, errors
        for p in ps:
            p.communicate(timeout=10)
        st = stoker.status(c.url)["counters"]
    assert len(steps[0]) == len(steps[1]) > 5, (len(steps[0]), len(steps[1]))
    assert all(s == (rows, row) for s in steps[0] + steps[1])
    assert not (seen[0] & seen[1])
    # What the ranks trained, plus what the group's end left queued (too little for a step).
    assert len(seen[0] | seen[1]) == st["acknowledged"] == 2000 - st["queued"], st


def test_a_groups_last_short_packed_step_is_shared_among_its_ranks():
    # The supply ends with fewer tokens than one rank's rows: the last step is short, and every
    # rank must get some of what is left (the first rank's packed plan would otherwise take it
    # all, the step never form, and both ranks stall).
    row, rows, world = 128, 2, 2
    with Cluster() as c:
        ps = start(c, 3, lengths="fixed:10", producers=1)
        for p in ps:
            p.communicate(timeout=10)
        got, errors = [[] for _ in range(world)], []

        def rank(r):
            try:
                with stoker.Client(c.url, stall_timeout=8, group="g", rank=r, world_size=world,
                                   pack=row, batch_size=rows) as client:
                    try:
                        for b in client.batches():
                            got[r].append(len(b.identities()[0]))
                    except stoker.SupplyEnded:
                        pass
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        assert not errors, errors
        assert sorted(sum(g) for g in got) == [1, 2], got  # one short step: 2 + 1 of the 3
        assert all(len(g) == 1 for g in got), got


def test_packed_ranks_over_strict_epochs_fit_their_rows_at_every_epoch_end():
    # A dataset of token sequences, strict epochs, three ranks packing 4 rows of 256 tokens: an
    # epoch's last step is shared among the ranks by the rule that made every other step (each
    # rank's rows), never one sequence more per rank by count ("take 5 rows of 256").
    row, rows, world, items, epochs = 256, 4, 3, 600, 3
    with Cluster("--dataset-size", str(items), "--epochs", str(epochs)) as c:
        for k in range(2):
            c.producer("--workload", "tokens", "--lengths", "lognormal:64:256", "--items",
                       str(items), "--delay", "0:0", name="t%d" % k, stdout=subprocess.DEVNULL)
        c.wait_producers(2)
        got = [[] for _ in range(world)]
        errors = []

        def rank(r):
            try:
                with stoker.Client(c.url, stall_timeout=10, group="g", rank=r, world_size=world,
                                   pack=row, batch_size=rows) as client:
                    try:
                        for b in client.batches():
                            b["tokens"].pack(row=row, rows=rows)  # raises when it overflows
                            got[r].extend(zip(*[a.tolist() for a in b.epoch_indices()]))
                    except stoker.SupplyEnded:
                        pass
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        ts = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not errors, errors
    every = [x for g in got for x in g]
    assert len(every) == len(set(every)), "an item trained twice in an epoch"
    for e in range(epochs):
        n = sum(1 for ep, _ in every if ep == e)
        # A group's end may leave fewer items than ranks queued (the leftover); nothing else.
        assert items - world < n <= items, "epoch %d: %d of %d items" % (e, n, items)


def test_bad_combinations_are_refused_with_their_names():
    for kw, word in (({"pack": 64, "max_tokens": 100}, "pack"),
                     ({"pack": 64, "buckets": True}, "buckets"),
                     ({"split": False}, "split"),
                     ({"max_tokens": 0}, "max_tokens")):
        try:
            stoker.Client("ipc:///nowhere", **kw)
        except ValueError as e:
            assert word in str(e), (kw, e)
        else:
            raise AssertionError("%r was accepted" % (kw,))
    with Cluster() as c:  # a fixed-shape schema has no tokens to count
        p = c.producer("--max-examples", "50", "--delay", "0:0", stderr=subprocess.PIPE)
        try:
            with stoker.Client(c.url, stall_timeout=5, max_tokens=64) as client:
                client.next_batch()
        except stoker.StokerError as e:
            assert "variable-length field" in str(e), e
        else:
            raise AssertionError("max_tokens with a fixed-shape schema was accepted")
        p.kill()
        p.wait()


def test_stoker_pull_batches_by_tokens():
    bad = subprocess.run([PULL, "--broker", "ipc:///nowhere", "--max-tokens", "64",
                          "--max-examples", "5"], capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2 and "max-examples" in bad.stderr, bad.stderr
    bad = subprocess.run([PULL, "--broker", "ipc:///nowhere", "--pack-whole"],
                         capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2 and "pack" in bad.stderr, bad.stderr
    with Cluster() as c:
        ps = start(c, 200, lengths="uniform:1:40", producers=1)
        out = subprocess.run([PULL, "--broker", c.url, "--max-tokens", "100", "--stall-timeout",
                              "5"], capture_output=True, text=True, timeout=60)
        for p in ps:
            p.communicate(timeout=10)
        st = stoker.status(c.url)
    assert out.returncode == 3, out.stderr  # the supply ended: every producer finished
    lines = out.stdout.splitlines()
    assert len(lines) == 200  # every example once; each line starts with its value's length
    consumer = [t for t in st["consumers"] if t.get("tokens")][0]
    assert consumer["tokens"] == sum(int(x.split()[0]) for x in lines), consumer
    assert consumer["batches_shm"] + consumer["batches_socket"] >= 200 * 20 // 100 // 2


if __name__ == "__main__":
    run(globals())
