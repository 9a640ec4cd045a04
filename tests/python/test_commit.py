"""Commit with checkpoints from Python: Client(commit=True) keeps its
acknowledgements until state_dict() (the torchdata StatefulDataLoader protocol) commits them. A
consumer that stops after a checkpoint without committing its later work, and one resumed with
load_state_dict(), together train every example exactly once (the lineage); so does a training
process SIGKILLed between checkpoints twice and started again. Commit is refused
for the ranks of a group. A rank's group commit after another rank closed raises GroupBroken
naming that rank (it said "commit: " and nothing more)."""

import threading
import time

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


# A training process with the StatefulDataLoader loop: every 5 batches it takes state_dict() (which
# commits) and saves it with its "model" (here: the identities it trained) atomically (temporary
# file, fsync, rename); started again it resumes from the saved checkpoint with load_state_dict().
# It prints the batches it trained so far, one line per batch.
TRAINING_PROCESS = r"""
import json, os, sys, time
import stoker
url, path = sys.argv[1], sys.argv[2]
saved = {"state": None, "trained": []}
if os.path.exists(path):
    with open(path) as f:
        saved = json.load(f)
trained = saved["trained"]

def checkpoint(client):
    state = client.state_dict()
    with open(path + ".tmp", "w") as f:
        json.dump({"state": state, "trained": trained}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)

with stoker.Client(url, stall_timeout=10, commit=True) as client:
    if saved["state"] is not None:
        client.load_state_dict(saved["state"])
    try:
        for i, batch in enumerate(client.batches(8)):
            sessions, seqs = batch.identities()
            trained.extend(zip(sessions.tolist(), seqs.tolist()))
            time.sleep(0.01)  # the training step
            if i % 5 == 4:
                checkpoint(client)
            print(i, flush=True)
    except stoker.SupplyEnded:
        pass
    checkpoint(client)
"""


def test_a_training_process_sigkilled_between_checkpoints_resumes_each_example_once():
    import json
    import os
    import signal
    import subprocess
    import sys
    with Cluster("--queue-depth", "64") as c:
        c.producer("--delay", "0:0", "--chunk", "4", "--max-examples", str(N), "--linger", "30")
        path = os.path.join(c.dir, "checkpoint.json")
        for kill in range(2):
            child = subprocess.Popen([sys.executable, "-c", TRAINING_PROCESS, c.url, path],
                                     stdout=subprocess.PIPE, text=True)
            try:
                # Two batches after its second checkpoint (batch 9): between checkpoints.
                for line in child.stdout:
                    if int(line) == 11:
                        break
                else:
                    raise AssertionError("the training process ended early: %s" % child.wait())
                child.send_signal(signal.SIGKILL)
                assert child.wait(10) == -signal.SIGKILL
            finally:
                if child.poll() is None:
                    child.kill()
                child.wait()
            with open(path) as f:
                assert len(json.load(f)["trained"]) == 80 * (kill + 1)
        final = subprocess.run([sys.executable, "-c", TRAINING_PROCESS, c.url, path],
                               stdout=subprocess.DEVNULL, timeout=60)
        assert final.returncode == 0, final
        with open(path) as f:
            lineage = [tuple(x) for x in json.load(f)["trained"]]
        assert len(set(lineage)) == len(lineage), "an example was trained twice in the lineage"
        assert sorted(s for _, s in lineage) == list(range(N)), "examples lost"


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


def test_group_commit_after_a_rank_closed_names_the_cause():
    with Cluster() as c:
        c.producer("--delay", "0:0")
        ranks = [stoker.Client(c.url, group="g", rank=r, world_size=2, batch_size=4, commit=True,
                               stall_timeout=10, name="rank-%d" % r) for r in range(2)]
        try:
            def steps(client):
                for _ in range(3):
                    client.next_batch().release()
            threads = [threading.Thread(target=steps, args=(r,)) for r in ranks]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert [r.group_step for r in ranks] == [3, 3], [r.group_step for r in ranks]
            ranks[1].close()
            for attempt in range(2):  # the reason is given again, not only the first time
                t0 = time.monotonic()
                try:
                    ranks[0].commit()
                except stoker.GroupBroken as e:
                    text = str(e)
                else:
                    raise AssertionError("a group commit after rank 1 closed succeeded")
                assert time.monotonic() - t0 < 10, time.monotonic() - t0
                reason = text.split("commit: ", 1)[1]
                assert reason.strip(), text
                assert "rank 1" in reason and "rank-1" in reason and "left" in reason, text
        finally:
            for r in ranks:
                r.close()


run(globals())
