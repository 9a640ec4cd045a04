"""Mixing sources by weight (docs/mixing.md): a consumer's batches drawn from pools of producers
in exact proportions. Real broker, real producers of three pools (one 5x slower than the
others), the Python client; every check is made from the examples' identities and sources as
they arrive: each source's running count within one example of weight x examples delivered
after every batch, every example once, and the stop rules at a source's end.

The cases of torchdata's MultiNodeWeightedSampler suite (test_multi_node_weighted_sampler.py),
in stoker's terms and with exact counts where it checks statistics: its proportions (the three
pools and the group's ranks below, within one example after every batch instead of a
tolerance), its stop criteria (FIRST_DATASET_EXHAUSTED: mix_stop "first"; ALL_DATASETS_EXHAUSTED:
"all"; CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED needs a source that starts again, which a stream is
not), its invalid weights and keys (refused, naming what is wrong), its ranks (every example
once over a group's ranks) and its state-dict round trips (a consumer resumed from 0, 10 and 30
committed batches, with other weights)."""

import collections
import os
import subprocess
import time

from helpers import PULL, Cluster, run

import stoker

WEIGHTS = {"a": 0.5, "b": 0.3, "c": 0.2}


def three_pools(c, slow="c"):
    """Producers of pools a, b, c; the slow pool's 5x slower than the others."""
    for pool in WEIGHTS:
        delay = "0.0001:0.0001" if pool == slow else "0.00002:0.00002"
        c.producer("--pool", pool, "--delay", delay, "--chunk", "16", name="p-" + pool)
    c.wait_producers(3)


class Books:
    """What a consumer got: per source, in all, and every identity once."""

    def __init__(self, weights):
        self.weights = weights
        self.got = collections.Counter()
        self.total = 0
        self.worst = 0.0
        self.seen = set()
        self.twice = 0
        self.sizes = collections.Counter()

    def add(self, batch):
        sources = batch.sources()
        assert len(sources) == batch.count
        assert None not in sources, sources
        at = 0
        for r in batch.runs:
            # A run is one producer's: every example of it has that producer's pool.
            pools = set(sources[at:at + r.count])
            assert len(pools) == 1, pools
            at += r.count
            for seq in range(r.first_seq, r.first_seq + r.count):
                key = (r.session, seq)
                self.twice += key in self.seen
                self.seen.add(key)
        self.got.update(sources)
        self.total += len(sources)
        self.sizes[len(sources)] += 1
        for pool, w in self.weights.items():
            self.worst = max(self.worst, abs(self.got[pool] - w * self.total))


def test_three_sources_stay_within_one_example_of_their_share_over_10000_batches():
    with Cluster() as c:
        three_pools(c)
        books = Books(WEIGHTS)
        with stoker.Client(c.url, mix=WEIGHTS, stall_timeout=20) as client:
            t0 = time.monotonic()
            for i, batch in enumerate(client.batches(8)):
                books.add(batch)
                if i + 1 == 10000:
                    break
            secs = time.monotonic() - t0
            assert client.duplicates() == 0
            st = stoker.status(c.url)
        assert books.twice == 0, books.twice
        assert books.worst < 1.0 + 1e-9, books.worst  # within one example, after every batch
        assert books.total >= 10000 * 8 * 0.95, books.sizes  # short batches only at waits' ends
        mine = [x for x in st["consumers"] if x.get("mix")]
        assert len(mine) == 1, st["consumers"]
        shares = {s["pool"]: s for s in mine[0]["mix"]["sources"]}
        # The broker's books count the batches prefetched beyond the last one taken too.
        delivered = sum(s["delivered"] for s in shares.values())
        assert books.total <= delivered <= books.total + 8 * 8, (books.total, delivered)
        for pool, w in WEIGHTS.items():
            assert abs(shares[pool]["target_share"] - w) < 1e-6, shares
            assert abs(shares[pool]["delivered"] - w * delivered) <= 1.0, shares
        print("10000 batches of 8 in %.1f s: %s, worst %.3f" % (secs, dict(books.got), books.worst))


def group_steps(world, steps, record, **client):
    """The ranks of a mixing group, each in a thread taking `steps` batches with stoker.Client
    (client: its options besides rank and world_size); record(r, batch, client) keeps what a test
    checks. Returns per rank what record returned for each batch; asserts no rank failed."""
    import threading
    got, errors = [[] for _ in range(world)], []

    def rank(r):
        try:
            with stoker.Client(rank=r, world_size=world, stall_timeout=20, **client) as cl:
                for i, b in enumerate(cl.batches(client.get("batch_size"))):
                    got[r].append(record(r, b, cl))
                    if i + 1 == steps:
                        break
        except Exception as e:  # reported below
            errors.append("rank %d: %r" % (r, e))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert all(len(g) == steps for g in got), [len(g) for g in got]
    return got


def identities(batch):
    return [(run.session, q) for run in batch.runs
            for q in range(run.first_seq, run.first_seq + run.count)]


def test_a_group_of_three_ranks_keeps_the_shares_per_global_step():
    world, batch, steps = 3, 8, 3334  # 10,002 batches in all
    with Cluster() as c:
        three_pools(c)
        # per rank: per step, its sources and identities
        got = group_steps(world, steps, lambda r, b, cl: (b.sources(), identities(b)), url=c.url,
                          mix=WEIGHTS, group="mixed", batch_size=batch)
        books = collections.Counter()
        total, worst, seen = 0, 0.0, set()
        for k in range(steps):
            for r in range(world):
                sources, ids = got[r][k]
                assert len(sources) == batch, (k, r, len(sources))  # equal batches, every rank
                books.update(sources)
                total += len(sources)
                seen.update(ids)
            for pool, w in WEIGHTS.items():
                worst = max(worst, abs(books[pool] - w * total))
        assert len(seen) == total, (len(seen), total)  # every example once, over the ranks
        assert worst < 1.0 + 1e-9, worst  # within one example of its share, every global step


def weights_at(base, schedule, blend, step):
    """docs/mixing.md's rule: the shares for batch number step (1 for the first)."""
    points = [(0, base)] + list(schedule)
    k = max(i for i, (at, _) in enumerate(points) if at <= step)
    at0, w0 = points[k]
    shares0 = {p: w / sum(w0.values()) for p, w in w0.items()}
    if blend != "linear" or k + 1 == len(points):
        return shares0
    at1, w1 = points[k + 1]
    t = (step - at0) / (at1 - at0)
    return {p: (1 - t) * shares0[p] + t * w1[p] / sum(w1.values()) for p in base}


def scheduled_run(c, schedule, blend, batches, batch=10):
    """A consumer of pools a and b at 1:1 whose weights follow schedule: the worst distance of a
    source's running count from its running target (the sum of each batch's share x its size)."""
    base = {"a": 1, "b": 1}
    got, target, worst, seen = collections.Counter(), collections.Counter(), 0.0, set()
    with stoker.Client(c.url, mix=base, mix_schedule=schedule, mix_blend=blend,
                       stall_timeout=20) as client:
        for k, b in enumerate(client.batches(batch)):
            shares = weights_at(base, schedule, blend, k + 1)
            got.update(b.sources())
            for pool in base:
                target[pool] += shares[pool] * b.count
            worst = max(worst, max(abs(got[p] - target[p]) for p in base))
            for r in b.runs:
                seen.update((r.session, q) for q in range(r.first_seq, r.first_seq + r.count))
            if k + 1 == batches:
                break
    assert len(seen) == sum(got.values())  # every example once
    return got, worst


def test_weights_change_by_schedule_at_a_step_and_in_a_linear_blend():
    with Cluster() as c:
        c.producer("--pool", "a", "--delay", "0:0", name="pa")
        c.producer("--pool", "b", "--delay", "0:0", name="pb")
        c.wait_producers(2)
        got, worst = scheduled_run(c, [(101, {"a": 9, "b": 1})], "step", 200)
        assert got == {"a": 500 + 900, "b": 500 + 100}, got
        assert worst < 1.0 + 1e-9, worst
        got, worst = scheduled_run(c, [(100, {"a": 1, "b": 0}), (150, {"a": 1, "b": 3})],
                                   "linear", 200)
        assert worst < 1.0 + 1e-9, worst
        assert got["a"] + got["b"] == 2000, got
    for bad, words in (([(0, {"a": 1, "b": 1})], "start at 1"), ([(5, {"a": 1})], "every pool"),
                       ([(5, {"a": 0, "b": 0})], "every weight is 0")):
        try:
            stoker.Client("ipc:///nowhere", mix={"a": 1, "b": 1}, mix_schedule=bad)
            raise AssertionError("mix_schedule=%r accepted" % (bad,))
        except ValueError as e:
            assert words in str(e), (bad, str(e))


def test_a_resumed_consumer_goes_on_with_its_schedule_from_the_checkpoints_batch():
    # state_dict() names the schedule's position (the batches trained under it); a consumer
    # resumed from it with the same mixture and schedule gets, at its k-th batch, the weights the
    # schedule gives at the checkpoint's batch + k: at a step, and inside a linear blend.
    for schedule, blend in (([(101, {"a": 9, "b": 1})], "step"),
                            ([(50, {"a": 1, "b": 0}), (150, {"a": 1, "b": 3})], "linear")):
        base, done = {"a": 1, "b": 1}, 60
        with Cluster() as c:
            c.producer("--pool", "a", "--delay", "0:0", name="pa")
            c.producer("--pool", "b", "--delay", "0:0", name="pb")
            c.wait_producers(2)
            kw = dict(mix=base, mix_schedule=schedule, mix_blend=blend, commit=True,
                      stall_timeout=20)
            with stoker.Client(c.url, **kw) as first:
                for k, b in enumerate(first.batches(10)):
                    if k + 1 == done:
                        break
                state = first.state_dict()
            assert state["mix"]["step"] == done, state["mix"]
            assert state["mix"]["schedule"] == schedule, state["mix"]
            got, target, worst = collections.Counter(), collections.Counter(), 0.0
            with stoker.Client(c.url, **kw) as second:
                second.load_state_dict(state)
                for k, b in enumerate(second.batches(10)):
                    shares = weights_at(base, schedule, blend, done + k + 1)
                    got.update(b.sources())
                    for pool in base:
                        target[pool] += shares[pool] * b.count
                    worst = max(worst, max(abs(got[p] - target[p]) for p in base))
                    if k + 1 == 100:
                        break
                again = second.state_dict()
        assert worst < 1.0 + 1e-9, (blend, worst, got, target)
        assert again["mix"]["step"] == done + 100, again["mix"]
        if blend == "step":  # 40 batches at 1:1, then 60 at 9:1
            assert got == {"a": 200 + 540, "b": 200 + 60}, got


def test_set_mix_changes_the_weights_from_a_numbered_batch_on():
    with Cluster() as c:
        c.producer("--pool", "a", "--delay", "0:0", name="pa")
        c.producer("--pool", "b", "--delay", "0:0", name="pb")
        c.wait_producers(2)
        got, target, worst, seen, start = collections.Counter(), {"a": 0.0, "b": 0.0}, 0.0, \
            set(), None
        with stoker.Client(c.url, mix={"a": 1, "b": 1}, stall_timeout=20) as client:
            for k, b in enumerate(client.batches(10)):
                if k + 1 == 100:
                    start = client.set_mix({"a": 3, "b": 1})
                    # Made ahead: the pulls in flight, and replies the client holds back
                    # until an earlier one comes (each freed its pull for another).
                    assert 100 < start <= 100 + 2 * client.prefetch + 1, start
                shares = {"a": 0.75, "b": 0.25} if start and k + 1 >= start else \
                    {"a": 0.5, "b": 0.5}
                got.update(b.sources())
                for p in target:
                    target[p] += shares[p] * b.count
                worst = max(worst, max(abs(got[p] - target[p]) for p in target))
                for r in b.runs:
                    seen.update((r.session, q) for q in range(r.first_seq, r.first_seq + r.count))
                if k + 1 == 300:
                    break
            st = stoker.status(c.url)
            try:
                client.set_mix({"a": 1, "c": 1})
                raise AssertionError("set_mix with another pool accepted")
            except ValueError as e:
                assert "each pool" in str(e), str(e)
        assert worst < 1.0 + 1e-9, worst
        assert len(seen) == 3000, len(seen)
        mine = [x for x in st["consumers"] if x.get("mix")][0]["mix"]["sources"]
        assert [round(s["target_share"], 6) for s in mine] == [0.75, 0.25], mine


def test_the_autoscale_signal_asks_the_slow_pool_for_its_share_of_the_demand():
    """A consumer mixing a fast and a 5x slower pool 1:1 needs as many examples of each: the
    broker's autoscale signal puts half its demand on each pool (not by what each supplies now),
    so the slow pool is the one asked to grow, by about 5x."""
    import threading
    with Cluster() as c:
        c.producer("--pool", "a", "--delay", "0.001:0.001", name="pa")
        c.producer("--pool", "b", "--delay", "0.005:0.005", name="pb")
        c.wait_producers(2)
        stop = []

        def eat():
            with stoker.Client(c.url, mix={"a": 1, "b": 1}, stall_timeout=10) as client:
                for _ in client.batches(16):
                    if stop:
                        break

        t = threading.Thread(target=eat)
        t.start()
        try:
            time.sleep(5)
            pools = {p["pool"]: p for p in stoker.status(c.url)["autoscale"]["pools"]}
        finally:
            stop.append(1)
            t.join(30)
    a, b = pools["a"], pools["b"]
    assert abs(a["demand"] - b["demand"]) <= 0.05 * a["demand"], pools  # half each
    assert b["wanted"] >= 3 * a["wanted"], pools  # the slow pool grows
    print("autoscale: a wants %d, b wants %d (%s)" % (a["wanted"], b["wanted"], b["why"]))


def resumed_lineage(checkpoint_at, per_pool=200):
    """A consumer at 1:1 commits checkpoint_at batches of 10 (state_dict()), trains 5 more and
    stops without committing them; one resumed from its state_dict() at 3:1 (stop rule "all")
    trains to the end. Returns (what the first committed, what it trained after, what the
    second trained, the second's worst distance from its 0.75 share over its first 4 batches,
    while both pools surely hold examples, the first's state)."""
    with Cluster("--queue-depth", "64") as c:
        for pool in "ab":
            c.producer("--pool", pool, "--delay", "0:0", "--chunk", "4", "--max-examples",
                       str(per_pool), "--linger", "30", name="p" + pool)
        c.wait_producers(2)
        committed, after = [], []

        def ids(batch):
            return [(r.session, q) for r in batch.runs
                    for q in range(r.first_seq, r.first_seq + r.count)]

        with stoker.Client(c.url, mix={"a": 1, "b": 1}, commit=True, stall_timeout=10,
                           batch_size=10) as first:
            state = first.state_dict()
            for i, batch in enumerate(first.batches(10)):
                (committed if i < checkpoint_at else after).extend(ids(batch))
                if i + 1 == checkpoint_at:
                    state = first.state_dict()
                if i + 1 == checkpoint_at + 5:
                    break
            first.close(acknowledge_held=False)
        resumed, got, worst, total = [], collections.Counter(), 0.0, 0
        with stoker.Client(c.url, mix={"a": 3, "b": 1}, mix_stop="all", commit=True,
                           stall_timeout=10) as second:
            second.load_state_dict(state)
            try:
                for i, batch in enumerate(second.batches(10)):
                    resumed.extend(ids(batch))
                    got.update(batch.sources())
                    total += batch.count
                    if i < 4:  # 40 examples: both pools hold at least 50 to the end
                        worst = max(worst, abs(got["a"] - 0.75 * total))
                    if i % 5 == 4:
                        second.state_dict()
            except stoker.SupplyEnded:
                pass
            second.state_dict()
    return committed, after, resumed, worst, state


def test_a_consumer_resumed_with_other_weights_trains_each_uncommitted_example_once():
    """Commit with checkpoints and a mixture, resumed from 0, 10 and 30 committed batches (the
    round trips of torchdata's MultiNodeWeightedSampler state-dict tests, checked exactly): the
    lineage (what the first committed and what the second trained) holds every example of both
    pools once, the uncommitted work comes again, and the resumed consumer's own shares are
    exact."""
    for checkpoint_at in (0, 10, 30):
        committed, after, resumed, worst, state = resumed_lineage(checkpoint_at)
        assert state["mix"]["weights"] == {"a": 1, "b": 1}, state
        lineage = committed + resumed
        assert len(set(lineage)) == len(lineage), "an example trained twice in the lineage"
        assert len(lineage) == 400, (checkpoint_at, len(lineage))  # nothing lost
        assert set(after) <= set(resumed), "the uncommitted work was not delivered again"
        assert worst < 1.0 + 1e-9, (checkpoint_at, worst)


def test_the_mixture_ends_with_its_first_dry_source_by_default():
    with Cluster() as c:
        c.producer("--pool", "a", "--delay", "0:0", "--max-examples", "100", name="pa")
        c.producer("--pool", "b", "--delay", "0.0001:0.0001", name="pb")
        c.wait_producers(2)
        books = Books({"a": 0.5, "b": 0.5})
        with stoker.Client(c.url, mix={"a": 1, "b": 1}, stall_timeout=10) as client:
            try:
                for batch in client.batches(10):
                    books.add(batch)
                raise AssertionError("the supply did not end")
            except stoker.SupplyEnded as e:
                assert "source 'a'" in str(e) and "first" in str(e), str(e)
        assert books.twice == 0
        assert books.got["a"] == 100, books.got  # every example of the dry source delivered
        assert abs(books.got["b"] - 100) <= 1, books.got
        assert books.worst < 1.0 + 1e-9


def test_stop_all_goes_on_reweighted_until_every_source_ran_dry():
    with Cluster() as c:
        c.producer("--pool", "a", "--delay", "0:0", "--max-examples", "100", name="pa")
        c.producer("--pool", "b", "--delay", "0:0", "--max-examples", "300", name="pb")
        c.wait_producers(2)
        books = Books({"a": 0.5, "b": 0.5})
        until_a_dry = None
        with stoker.Client(c.url, mix="a=1,b=1", mix_stop="all", stall_timeout=10) as client:
            try:
                for batch in client.batches(10):
                    books.add(batch)
                    if books.got["a"] == 100 and until_a_dry is None:
                        until_a_dry = books.worst  # exact while both are in
                raise AssertionError("the supply did not end")
            except stoker.SupplyEnded as e:
                assert "every source" in str(e), str(e)
        assert books.twice == 0
        assert books.got == {"a": 100, "b": 300}, books.got
        assert until_a_dry is not None and until_a_dry < 1.0 + 1e-9, until_a_dry


def test_a_source_with_no_producer_makes_the_batch_wait_and_says_which():
    with Cluster() as c:
        c.producer("--pool", "a", "--delay", "0:0", name="pa")
        c.wait_producers(1)
        client = stoker.Client(c.url, mix={"a": 0.5, "nowhere": 0.5}, stall_timeout=1.5)
        try:
            b = client.next_batch(8)
            raise AssertionError("a batch came without any example of pool 'nowhere': %d "
                                 "examples of %s, runs %s" % (b.count, b.sources(), b.runs))
        except stoker.Stalled as e:
            assert "nowhere" in str(e), str(e)
        st = stoker.status(c.url)
        mine = [x for x in st["consumers"] if x.get("mix")]
        assert mine and mine[0]["mix"]["waits_for"] == "nowhere", mine
        client.close()


def test_bad_mixtures_are_refused_with_the_reason():
    for mix, words in (({"a": -1}, "positive"), ({"a": "x"}, "not a number"), ("a", "pool=weight"),
                       ({}, "names no source"), ({"a,b": 1}, "not a pool name")):
        try:
            stoker.Client("ipc:///nowhere", mix=mix)
            raise AssertionError("mix=%r accepted" % (mix,))
        except ValueError as e:
            assert words in str(e), (mix, str(e))
    try:
        stoker.Client("ipc:///nowhere", mix={"a": 1}, mix_stop="never")
        raise AssertionError("mix_stop='never' accepted")
    except ValueError as e:
        assert "first" in str(e) and "all" in str(e), str(e)
    out = subprocess.run([PULL, "--broker", "ipc:///nowhere", "--mix", "a=1,b=0"],
                         capture_output=True, timeout=10)
    assert out.returncode == 2 and b"pool 'b' has weight 0" in out.stderr, out.stderr
    with Cluster() as c:
        c.producer("--pool", "a", "--delay", "0:0", name="pa")
        c.wait_producers(1)
        first = stoker.Client(c.url, mix={"a": 1}, group="g", rank=0, world_size=2,
                              batch_size=4)
        try:
            stoker.Client(c.url, mix={"a": 2}, group="g", rank=1, world_size=2, batch_size=4)
            raise AssertionError("ranks with different mixtures accepted")
        except stoker.StokerError as e:
            assert "disagree on the mixture" in str(e), str(e)
        first.close()


def tokens_run(c, weights, batch_kw, batches):
    """A consumer mixing token sequences of pools by weights, batches made by tokens (batch_kw):
    after every batch, the worst distance of a source's running tokens from its share of all
    tokens given; every example once; no batch padded past its budget. Returns (worst, tokens
    per source, the longest sequence seen, batches)."""
    got, total, worst, longest, seen, n = collections.Counter(), 0, 0.0, 0, set(), 0
    budget = batch_kw.get("max_tokens")
    with stoker.Client(c.url, mix=weights, stall_timeout=20, **batch_kw) as client:
        for k, b in enumerate(client.batches(batch_kw.get("batch_size"))):
            lengths = b["tokens"].lengths
            lengths = [int(x) for x in (lengths() if callable(lengths) else lengths)]
            sources = b.sources()
            assert len(sources) == len(lengths)
            if budget and len(lengths) > 1:
                assert len(lengths) * max(lengths) <= budget, (lengths, budget)
            for pool, n_tok in zip(sources, lengths):
                got[pool] += n_tok
                total += n_tok
            longest = max([longest] + lengths)
            share = sum(weights.values())
            worst = max(worst, max(abs(got[p] - w / share * total) for p, w in weights.items()))
            for r in b.runs:
                for q in range(r.first_seq, r.first_seq + r.count):
                    assert (r.session, q) not in seen, "example delivered twice"
                    seen.add((r.session, q))
            n = k + 1
            if n == batches:
                break
    return worst, got, longest, n


def test_a_mixture_by_tokens_keeps_each_sources_share_of_the_tokens():
    # With batches made by tokens the shares count tokens: each next sequence comes from the
    # source furthest behind its share, so every source stays within about one sequence of its
    # target after every batch, here with sequences of 1 to 512 tokens, by a budget alone and by
    # a budget with a count, two and three sources (one of them 5x slower: 10,000 batches).
    for weights, slow in (({"a": 0.7, "b": 0.3}, None), (WEIGHTS, "c")):
        with Cluster() as c:
            for pool in weights:
                delay = "0.0005:0.0005" if pool == slow else "0.0001:0.0001"
                c.producer("--pool", pool, "--workload", "tokens", "--lengths",
                           "lognormal:64:512", "--delay", delay, name="p-" + pool)
            c.wait_producers(len(weights))
            # The three sources over 10,000 batches, as the mixture by count is checked.
            runs = ((({"max_tokens": 4096}, 300), ({"max_tokens": 4096, "batch_size": 24}, 300))
                    if slow is None else (({"max_tokens": 1024}, 10000),
                                          ({"max_tokens": 4096, "batch_size": 24}, 300)))
            for batch_kw, batches in runs:
                worst, got, longest, n = tokens_run(c, weights, batch_kw, batches)
                print("tokens mixed %s %s: worst %.1f tokens from the share over %d batches "
                      "(longest %d), %s" % (weights, batch_kw, worst, n, longest, dict(got)))
                assert n == batches, n
                bound = longest * (len(weights) - 1)
                assert worst <= bound, (worst, bound, got)
            st = stoker.status(c.url)
            mine = [x for x in st["consumers"] if x.get("mix")]
            assert mine and all(x.get("tokens") for x in mine), mine


def test_a_mixture_by_tokens_resumed_trains_each_uncommitted_sequence_once():
    # Commit with checkpoints, a mixture by tokens: the first consumer commits 20 batches, takes
    # 5 more and stops without committing them (their leases go back, and with them their
    # tokens in its books); one resumed from its state_dict() with other weights takes the rest.
    # The lineage holds every sequence of both pools once.
    with Cluster("--queue-depth", "64") as c:
        for pool in "ab":
            c.producer("--pool", pool, "--workload", "tokens", "--lengths", "lognormal:32:128",
                       "--delay", "0:0", "--chunk", "4", "--max-examples", "400", "--linger",
                       "30", name="p" + pool)
        c.wait_producers(2)
        committed, after, resumed = [], [], []

        def ids(batch):
            return [(r.session, q) for r in batch.runs
                    for q in range(r.first_seq, r.first_seq + r.count)]

        with stoker.Client(c.url, mix={"a": 1, "b": 1}, commit=True, stall_timeout=10,
                           max_tokens=256) as first:
            for i, batch in enumerate(first.batches()):
                (committed if i < 20 else after).extend(ids(batch))
                if i + 1 == 20:
                    state = first.state_dict()
                if i + 1 == 25:
                    break
            first.close(acknowledge_held=False)
        with stoker.Client(c.url, mix={"a": 3, "b": 1}, mix_stop="all", commit=True,
                           stall_timeout=10, max_tokens=256) as second:
            second.load_state_dict(state)
            try:
                for i, batch in enumerate(second.batches()):
                    resumed.extend(ids(batch))
                    if i % 2 == 1:  # the producers retain what is not committed: bounded
                        second.state_dict()
            except stoker.SupplyEnded:
                pass
            second.state_dict()
    lineage = committed + resumed
    assert len(set(lineage)) == len(lineage), "a sequence trained twice in the lineage"
    assert len(lineage) == 800, len(lineage)  # nothing lost
    assert after and set(after) <= set(resumed), "the uncommitted work was not delivered again"


def test_a_group_mixing_by_tokens_keeps_the_shares_per_global_step():
    # A 2-rank group mixing two sources 0.7/0.3 by tokens (one 5x slower): every step gives each
    # rank a batch whole (its budget's worth), the step's sequences come from the sources
    # furthest behind their shares of the tokens over both ranks, so after every global step
    # each source is within one longest sequence of its share; every sequence once.
    world, steps, budget, weights = 2, 1500, 2048, {"a": 0.7, "b": 0.3}
    with Cluster() as c:
        for pool in weights:
            delay = "0.0005:0.0005" if pool == "b" else "0.0001:0.0001"
            c.producer("--pool", pool, "--workload", "tokens", "--lengths", "lognormal:64:512",
                       "--delay", delay, name="p-" + pool)
        c.wait_producers(2)

        def record(r, b, cl):  # per rank and step: sources, lengths, identities, the step
            lengths = b["tokens"].lengths
            lengths = [int(x) for x in (lengths() if callable(lengths) else lengths)]
            return b.sources(), lengths, identities(b), cl.group_step

        got = group_steps(world, steps, record, url=c.url, mix=weights, group="mixed",
                          max_tokens=budget)
        for r in range(world):
            assert [g[3] for g in got[r]] == list(range(1, steps + 1)), r  # in step order
        books, total, worst, longest, seen, n = collections.Counter(), 0, 0.0, 0, set(), 0
        for k in range(steps):
            for r in range(world):
                sources, lengths, ids, _ = got[r][k]
                assert len(lengths) * max(lengths) <= budget, (k, r, lengths)
                for pool, n_tok in zip(sources, lengths):
                    books[pool] += n_tok
                    total += n_tok
                longest = max([longest] + lengths)
                seen.update(ids)
                n += len(ids)
            worst = max(worst, max(abs(books[p] - w * total) for p, w in weights.items()))
        assert len(seen) == n, (len(seen), n)  # every sequence once, over the ranks
        # As for one consumer with two sources: within one longest sequence (a step's undone
        # try gives its tokens back to the group's books).
        assert worst <= longest, (worst, longest, dict(books))
        print("group mixing by tokens: worst %.0f tokens from the share over %d steps (longest "
              "%d), %s" % (worst, steps, longest, dict(books)))


def test_a_mixture_with_buckets_or_packed_rows_is_refused_naming_why():
    with Cluster() as c:
        c.producer("--pool", "a", "--workload", "tokens", "--lengths", "fixed:8", name="pa")
        c.wait_producers(1)
        for kw, word in (({"max_tokens": 256, "buckets": True}, "length buckets"),
                         ({"pack": 64}, "packed rows")):
            try:
                stoker.Client(c.url, mix={"a": 1}, batch_size=8, **kw)
                raise AssertionError("a mixture with %r accepted" % (kw,))
            except stoker.StokerError as e:
                assert "mixture" in str(e) and word in str(e), str(e)


def test_stoker_pull_mixes_and_reports_each_source():
    with Cluster() as c:
        c.producer("--pool", "a", "--delay", "0:0", name="pa")
        c.producer("--pool", "b", "--delay", "0:0", name="pb")
        c.wait_producers(2)
        out = subprocess.run([PULL, "--broker", c.url, "--mix", "a=3,b=1", "--batch-size", "8",
                              "--max-examples", "400", "--format", "raw"],
                             capture_output=True, timeout=30)
        assert out.returncode == 0, out.stderr
        st = stoker.status(c.url)
        mine = [x for x in st["consumers"] if x.get("mix")]
        got = {s["pool"]: s["delivered"] for s in mine[0]["mix"]["sources"]}
        # 400 written; a last batch pulled and not written may count too (prefetch).
        assert abs(got["a"] - 3 * got["b"]) <= 4, got
        assert got["a"] + got["b"] >= 400, got


def test_the_mixing_page_runs_as_written():
    """docs/mixing.md: its producers (pools and names as the page starts them) and its Python
    block, run as written against a test broker (the page's address replaced)."""
    import re
    import sys
    import tempfile
    root = os.environ.get("STOKER_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
    with open(os.path.join(root, "docs", "mixing.md")) as f:
        page = f.read()
    shell = re.search(r"^```sh\n(.*?)^```", page, re.S | re.M).group(1)
    code = re.search(r"^```python\n(.*?)^```", page, re.S | re.M).group(1)
    starts = [line.split() for line in shell.splitlines() if line.startswith("stoker-producer")]
    assert len(starts) == 3, shell
    with Cluster() as c, tempfile.TemporaryDirectory(prefix="stoker-doc-") as tmp:
        for words in starts:
            pool = words[words.index("--pool") + 1]
            name = words[words.index("--name") + 1]
            c.producer("--pool", pool, "--delay", "0:0", name=name)
        c.wait_producers(3)
        path = os.path.join(tmp, "mixing.py")
        with open(path, "w") as f:
            f.write(code.replace("tcp://localhost:7070", c.url))
        p = subprocess.run([sys.executable, path], capture_output=True, timeout=120, cwd=tmp)
        print(p.stdout.decode(errors="replace")[-500:], p.stderr.decode(errors="replace")[-1500:])
        assert p.returncode == 0, "docs/mixing.md's Python block failed"
        assert b"'code': 600" in p.stdout, p.stdout


if __name__ == "__main__":
    run(globals())
