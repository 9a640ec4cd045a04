"""Commit with checkpoints from Python (issue 16): Client(commit=True) keeps its
acknowledgements until state_dict() (the torchdata StatefulDataLoader protocol) commits them. A
consumer that stops after a checkpoint without committing its later work, and one resumed with
load_state_dict(), together train every example exactly once (the lineage). Commit is refused
for the ranks of a group."""

from helpers import Cluster, require, run

np = require("numpy")
import stoker  # noqa: E402

N = 240


def ids(batch):
    sessions, seqs = batch.identities()
    return list(zip(sessions.tolist(), seqs.tolist()))


def test_resumed_lineage_sees_each_example_once():
    with Cluster("--queue-depth", "64") as c:
        c.producer("--delay", "0:0", "--chunk", "4", "--max-examples", str(N), "--linger", "30")
        checkpoint, after = [], []
        with stoker.Client(c.url, stall_timeout=10, commit=True) as first:
            for i, batch in enumerate(first.batches(8)):
                (checkpoint if i < 10 else after).extend(ids(batch))
                if i == 9:
                    state = first.state_dict()  # the checkpoint: 10 batches committed
                    assert state["committed_batches"] == 10, state
                if i == 14:
                    break
            # Dies without committing the 5 batches after the checkpoint (no acknowledgement).
            first.close(acknowledge_held=False)
        assert len(checkpoint) == 80 and len(after) == 40
        resumed = []
        with stoker.Client(c.url, stall_timeout=10, commit=True) as second:
            second.load_state_dict(state)
            try:
                for i, batch in enumerate(second.batches(8)):
                    resumed.extend(ids(batch))
                    if i % 5 == 4:
                        second.state_dict()
            except stoker.SupplyEnded:
                pass
            second.state_dict()
        lineage = checkpoint + resumed
        assert len(set(lineage)) == len(lineage), "an example was trained twice in the lineage"
        assert sorted(s for _, s in lineage) == list(range(N)), "examples lost"
        assert set(after) <= set(resumed), "the uncommitted work was not delivered again"


def test_state_dict_round_trip_is_checked():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--max-examples", "16")
        with stoker.Client(c.url, stall_timeout=10, commit=True) as client:
            next(client.batches(4))
            state = client.state_dict()
            client.load_state_dict(state)
            try:
                client.load_state_dict({"something": "else"})
            except ValueError:
                pass
            else:
                raise AssertionError("a foreign state_dict was accepted")


def test_uncommitted_batches_are_not_held_up_by_retention():
    # Two producers with the default retention (twice the depth they are told) and a consumer
    # that never commits: the broker counts the held leases into that depth, so 100 batches of
    # 64 (far beyond 2 x 2 x 64 examples) come without a stall while all stay uncommitted.
    with Cluster() as c:
        for k in range(2):
            c.producer("--delay", "0:0", "--chunk", "64", "--seed", str(k + 1))
        with stoker.Client(c.url, stall_timeout=10, commit=True) as client:
            n = sum(b.count for b in client.batches(64, max_batches=100))
            assert n == 6400, n
            st = stoker.status(c.url)["counters"]
            assert st["acknowledged"] == 0 and st["in_flight"] >= 6400, st


def test_commit_with_a_group_is_refused():
    # The ranks of a group acknowledge after each step: asking for both is an error naming both.
    try:
        stoker.Client("ipc:///nonexistent", commit=True, group="g", rank=0, world_size=1)
    except ValueError as e:
        assert "commit" in str(e) and "'g'" in str(e), e
    else:
        raise AssertionError("commit=True with a group was accepted")


run(globals())
