"""Groups where they meet other features: ranks of one group as
processes of their own (stoker.Client with group=, rank=, world_size=) against a real broker and
real producers: over a dataset whose size is not a multiple of a step, strict and overlapping
epochs, a lingering producer, a producer pushing as fast as it can into a small queue, and a
broker restarted under two producers. Checked from the identities each rank wrote: every item
once per epoch, every rank the same number of steps, each epoch ending at the same step on every
rank, the end reaching every rank, the leftover equal to what stays queued. Every wait is bounded
(reap kills what is left and fails)."""

import json
import os
import signal
import subprocess
import sys
import time

import helpers

helpers.require("numpy")
import stoker  # noqa: E402

# One rank: `for epoch in client.epochs(n)` (or batches() when n is 0) as docs/datasets.md shows,
# recording each batch's size and items per epoch loop, then how the supply ended.
RANK_SCRIPT = r"""
import json, sys
import stoker
url, rank, world, batch, epochs, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
rec = {"loops": [], "end": None, "leftover": None, "error": None, "batches": 0}
c = stoker.Client(url, group="g", rank=rank, world_size=world, stall_timeout=float(sys.argv[7]))
try:
    if epochs > 0:
        for ep in c.epochs(epochs, batch):
            loop = {"sizes": [], "items": []}
            rec["loops"].append(loop)
            for b in ep:
                e, i = b.epoch_indices()
                loop["sizes"].append(len(e))
                loop["items"] += [[int(x), int(y)] for x, y in zip(e, i)]
        c.next_batch(batch)  # after the last epoch: the end
        rec["error"] = "a batch after the last epoch"
    else:
        loop = {"sizes": [], "items": []}
        rec["loops"].append(loop)
        for b in c.batches(batch):
            s, q = b.identities()
            loop["sizes"].append(len(s))
            loop["items"] += [[int(x), int(y)] for x, y in zip(s, q)]
except stoker.SupplyEnded as e:
    rec["end"] = e.reason
    rec["leftover"] = e.leftover
except stoker.StokerError as e:
    rec["error"] = "%s: %s" % (type(e).__name__, e)
finally:
    c.close()
json.dump(rec, open(out, "w"))
"""


def launch(url, rank, world, batch, epochs, out, stall=8.0):
    return subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, url, str(rank), str(world),
                             str(batch), str(epochs), out, str(stall)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)



reap = helpers.reap


def run_ranks(c, world, batch, epochs, timeout=60, stall=8.0):
    outs = [os.path.join(c.dir, "rank%d.json" % r) for r in range(world)]
    procs = [launch(c.url, r, world, batch, epochs, outs[r], stall) for r in range(world)]
    for rc, out, err in reap(procs, timeout):
        assert rc == 0, "a rank failed:\n" + err[-3000:]
    return [json.load(open(o)) for o in outs]


def check_common(records, st, leftover_expected=None):
    """Equal steps, the end on every rank, the leftover equal to what stays queued."""
    for r, rec in enumerate(records):
        assert rec["error"] is None, "rank %d: %s" % (r, rec["error"])
        assert rec["end"] is not None, "rank %d never got the end" % r
    steps = [sum(len(loop["sizes"]) for loop in rec["loops"]) for rec in records]
    assert len(set(steps)) == 1, "ranks ran different numbers of steps: %s" % steps
    for r, rec in enumerate(records):
        assert all(s >= 1 for loop in rec["loops"] for s in loop["sizes"]), "rank %d: empty" % r
    leftovers = {rec["leftover"] for rec in records}
    assert len(leftovers) == 1, "ranks disagree on the leftover: %s" % leftovers
    leftover = leftovers.pop()
    assert leftover == st["counters"]["queued"], \
        "leftover %s, queued %d" % (leftover, st["counters"]["queued"])
    if leftover_expected is not None:
        assert leftover == leftover_expected, (leftover, leftover_expected)
    g = [g for g in st["groups"] if g["name"] == "g"]
    assert g and g[-1]["state"] == "ended", st["groups"]
    assert st["counters"]["in_flight"] == 0, st["counters"]
    return steps[0]


def check_epochs(records, st, size, epochs, strict, early=False):
    check_common(records, st)
    # The last epoch's last items, when fewer than the ranks, are left over (docs/groups.md):
    # still queued, that epoch not done.
    leftover = records[0]["leftover"]
    assert leftover < len(records), "leftover %d, %d ranks" % (leftover, len(records))
    done = epochs - (1 if leftover else 0)
    assert st["dataset"]["epochs_done"] == done, \
        "epochs_done %d of %d" % (st["dataset"]["epochs_done"], epochs)
    # Every rank saw the same number of epochs, each of the same number of steps.
    shape = [[len(loop["sizes"]) for loop in rec["loops"]] for rec in records]
    assert all(s == shape[0] for s in shape), "epochs of different lengths per rank: %s" % shape
    assert len(shape[0]) == epochs, shape
    # Every item once per epoch, across the ranks.
    seen = {}
    for rec in records:
        for k, loop in enumerate(rec["loops"]):
            for e, i in loop["items"]:
                seen[(e, i)] = seen.get((e, i), 0) + 1
                # Strict: each loop its epoch's items; with a group's leftover of fewer items
                    # than ranks riding with the next epoch's first step, also that step's.
                if strict:
                    assert e == k or (early and e == k + 1), "strict: item (%d, %d) in epoch loop %d" % (e, i, k)
    twice = [x for x, n in seen.items() if n > 1]
    assert not twice, "items trained twice: %s" % twice[:10]
    want = {(e, i) for e in range(epochs) for i in range(size)}
    assert set(seen) <= want and len(want - set(seen)) == leftover and \
        all(e == epochs - 1 for e, _ in want - set(seen)), "missing %s, extra %s" % (sorted(want - set(seen))[:10],
                                                        sorted(set(seen) - want)[:10])


def dataset_run(size, epochs, strict, world=2, batch=16, chunk=4, early=False):
    args = ["--dataset-size", str(size), "--epochs", str(epochs)]
    if strict:
        args.append("--strict-epochs")
    with helpers.Cluster(*args) as c:
        c.producer("--items", str(size), "--delay", "0:0", "--chunk", str(chunk),
                   stdout=subprocess.DEVNULL)
        records = run_ranks(c, world, batch, epochs)
        st = stoker.status(c.url)
        check_epochs(records, st, size, epochs, strict, early)
        return records


# Defect 1: 100 items, 2 ranks of 16: 3 full steps and a short one per epoch, not a stall.
def test_dataset_not_a_multiple_of_a_step_ends_its_epoch():
    dataset_run(100, 1, strict=False)


# Defects 1 and 2: strict epochs; each epoch ends at the same step on both ranks.
def test_strict_epochs_end_at_the_same_step_on_every_rank():
    records = dataset_run(100, 3, strict=True)
    # 100 = 3 x 32 + 4: 3 full steps and one of 2 + 2 per epoch, in step order (the client puts
    # prefetched replies that overtook each other back in order).
    for rec in records:
        assert [loop["sizes"] for loop in rec["loops"]] == [[16, 16, 16, 2]] * 3, \
            [loop["sizes"] for loop in rec["loops"]]


# Defects 1 and 2: overlapping epochs (the default); 3 ranks, a size that leaves 1 over a step.
def test_overlapping_epochs_three_ranks_end_at_the_same_step():
    dataset_run(97, 3, strict=False, world=3, batch=8, chunk=3)


# Defect 1: fewer items than ranks at a strict epoch's end ride with the next epoch's first step.
def test_strict_epoch_end_with_fewer_items_than_ranks():
    records = dataset_run(25, 3, strict=True, world=3, batch=4, chunk=1, early=True)
    # The last epoch cannot hand its last item on: see the next test for the final epoch.
    del records


# Defect 1 (--linger): a producer that is done and waits for its examples to be trained.
def test_lingering_producer_does_not_stall_the_group():
    with helpers.Cluster() as c:
        p = c.producer("--max-examples", "100", "--linger", "20", "--delay", "0:0",
                       stdout=subprocess.DEVNULL)
        t0 = time.monotonic()
        records = run_ranks(c, 2, 16, 0, timeout=30)
        took = time.monotonic() - t0
        st = stoker.status(c.url)
        check_common(records, st, 0)
        p.wait(timeout=25)
        got = sorted(tuple(x) for rec in records for x in rec["loops"][0]["items"])
        assert len(got) == 100 and len(set(got)) == 100, len(got)
        assert took < 10, "the ranks took %.1f s (the producer lingers 20 s)" % took


# Defect 3: one producer pushing as fast as it can (two pushes in flight) into a queue of 64,
# three ranks of 7: no short step while it is alive (only the last one may be short).
def test_no_short_steps_while_the_producer_has_room():
    with helpers.Cluster("--queue-depth", "64") as c:
        c.producer("--delay", "0:0", "--chunk", "1", "--max-examples", "5000",
                   stdout=subprocess.DEVNULL)
        records = run_ranks(c, 3, 7, 0, timeout=90)
        st = stoker.status(c.url)
        steps = check_common(records, st)
        for rec in records:
            short = [k for k, s in enumerate(rec["loops"][0]["sizes"]) if s < 7]
            assert short in ([], [steps - 1]), "short steps %s of %d" % (short, steps)
        got = [tuple(x) for rec in records for x in rec["loops"][0]["items"]]
        assert len(got) == len(set(got)) == 5000 - st["counters"]["queued"]


# Defect 7: after a broker restart, a producer that finishes first does not end the group's
# supply while another is still within --producer-timeout of coming back (plain trainers wait so
# already: supply_state).
def test_group_waits_for_returning_producers_after_a_restart():
    with helpers.Cluster("--producer-timeout", "8") as c:
        fast = c.producer("--max-examples", "64", "--delay", "0:0", "--retain", "256",
                          "--linger", "30", stdout=subprocess.DEVNULL)
        # Endless: it ends when told (SIGTERM), after it came back.
        slow = c.producer("--delay", "0.002:0.002", "--retain", "256", stdout=subprocess.DEVNULL)
        c.wait_producers(2)
        deadline = time.monotonic() + 10
        while stoker.status(c.url)["counters"]["queued"] < 96:
            assert time.monotonic() < deadline, "the producers did not push 128 examples"
            time.sleep(0.05)
        sessions = [int(p["session"], 16) if isinstance(p["session"], str) else p["session"]
                    for p in stoker.status(c.url)["producers"]]
        # A plain trainer trains some of each first, so both come back to the new broker as
        # returning producers (a hello from a seq past 0).
        plain = set()
        with stoker.Client(c.url, stall_timeout=5) as pc:
            for b in pc.batches(4):
                plain |= {(int(x), int(y)) for x, y in zip(*b.identities())}
                if all(sum(1 for x, _ in plain if x == sess) >= 8 for sess in sessions):
                    break
        time.sleep(1.0)  # the lingering producers hear what was trained
        slow.send_signal(signal.SIGSTOP)
        c.broker.kill()
        c.broker.wait()
        c.broker = subprocess.Popen([helpers.BROKER, "--listen", c.url, "--log-level",
                                     os.environ.get("GM_LOG", "error"), "--producer-timeout", "8"],
                                    stdout=subprocess.DEVNULL)
        procs = None
        try:
            c.wait_producers(1, timeout=10)  # fast came back (the schema is known again)
            outs = [os.path.join(c.dir, "rank%d.json" % r) for r in range(2)]
            # Steps of one example: fast's last ones do not wait for slow's to fill a step.
            procs = [launch(c.url, r, 2, 1, 0, outs[r], stall=15.0) for r in range(2)]
            time.sleep(3.0)  # fast re-pushes, is trained and finishes; slow is still away
            slow.send_signal(signal.SIGCONT)
            time.sleep(2.0)
            slow.send_signal(signal.SIGTERM)  # it says goodbye: the end comes after its window
            for rc, out, err in reap(procs, 40):
                assert rc == 0, "a rank failed:\n" + err[-3000:]
        finally:
            slow.send_signal(signal.SIGCONT)
        records = [json.load(open(o)) for o in outs]
        st = stoker.status(c.url)
        check_common(records, st)
        got = [tuple(x) for rec in records for x in rec["loops"][0]["items"]]
        assert len(got) == len(set(got)), "trained twice by the ranks"
        ends = {int(p["session"], 16) if isinstance(p["session"], str) else p["session"]:
                p["next_seq"] for p in st["producers"]}
        assert len(ends) == 2, "slow never came back: %s" % st["producers"]
        want = {(sess, q) for sess in sessions for q in range(ends[sess])}
        missing = want - set(got) - plain
        assert len(missing) == st["counters"]["queued"], \
            "%d of %d never trained (%d by the ranks, %d before), %d queued" % (
                len(missing), len(want), len(got), len(plain), st["counters"]["queued"])


# Names given on the command line run only those tests.


# One rank that stops after `pause_at` steps until the file `go` exists (the test restarts the
# broker meanwhile), then trains to the end; records its steps and items as RANK_SCRIPT does.
PAUSING_RANK = r"""
import json, os, sys, time
import stoker
url, rank, world, batch, pause_at, go, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
rec = {"loops": [{"sizes": [], "items": []}], "end": None, "leftover": None, "error": None}
loop = rec["loops"][0]
c = stoker.Client(url, group="g", rank=rank, world_size=world, stall_timeout=20.0)
try:
    for b in c.batches(batch):
        s, q = b.identities()
        loop["sizes"].append(len(s))
        loop["items"] += [[int(x), int(y)] for x, y in zip(s, q)]
        if len(loop["sizes"]) == pause_at:
            open(out + ".paused", "w").close()
            deadline = time.monotonic() + 30
            while not os.path.exists(go) and time.monotonic() < deadline:
                time.sleep(0.02)
except stoker.SupplyEnded as e:
    rec["end"] = e.reason
    rec["leftover"] = e.leftover
except stoker.StokerError as e:
    rec["error"] = "%s: %s" % (type(e).__name__, e)
finally:
    c.close()
json.dump(rec, open(out, "w"))
"""


# Defect 6: the broker dies while rank 0 has trained one step more than rank 1 (whose reply for
# that step it had prefetched, from the broker that died, and must not train). The new broker
# learns each rank's step count and what it trained from their hellos: the group resumes at
# rank 0's step, rank 1 catches up with batches of its own, and both end with the same number of
# steps, each example trained once.
def test_group_resumes_its_step_count_across_a_broker_restart():
    with helpers.Cluster("--producer-timeout", "3") as c:
        for _ in range(2):
            c.producer("--max-examples", "300", "--delay", "0.0005:0.001", "--retain", "1024",
                       "--linger", "30", stdout=subprocess.DEVNULL)
        c.wait_producers(2)
        go = os.path.join(c.dir, "go")
        outs = [os.path.join(c.dir, "rank%d.json" % r) for r in range(2)]
        procs = [subprocess.Popen([sys.executable, "-c", PAUSING_RANK, c.url, str(r), "2", "8",
                                   str(6 - r), go, outs[r]],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        deadline = time.monotonic() + 30
        while not all(os.path.exists(o + ".paused") for o in outs):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                "the ranks did not reach their pause: %s" % [p.poll() for p in procs]
            time.sleep(0.02)
        time.sleep(0.3)  # rank 1's prefetched pulls of step 6 come back
        c.broker.kill()
        c.broker.wait()
        c.broker = subprocess.Popen([helpers.BROKER, "--listen", c.url, "--log-level", "error",
                                     "--producer-timeout", "3"], stdout=subprocess.DEVNULL)
        open(go, "w").close()
        for rc, out, err in reap(procs, 60):
            assert rc == 0, "a rank failed:\n" + err[-3000:]
        records = [json.load(open(o)) for o in outs]
        st = stoker.status(c.url)
        steps = check_common(records, st)
        assert steps > 6, "the group did not go on after the restart: %d steps" % steps
        got = [tuple(x) for rec in records for x in rec["loops"][0]["items"]]
        twice = sorted({x for x in got if got.count(x) > 1})
        assert not twice, "trained twice: %s" % twice[:10]
        ends = {int(p["session"], 16) if isinstance(p["session"], str) else p["session"]:
                p["next_seq"] for p in st["producers"]}
        want = {(s, q) for s, n in ends.items() for q in range(n)}
        missing = want - set(got)
        assert len(missing) == st["counters"]["queued"], \
            "%d never trained, %d queued" % (len(missing), st["counters"]["queued"])


helpers.run({k: v for k, v in globals().items() if len(sys.argv) < 2 or k in sys.argv[1:]})
