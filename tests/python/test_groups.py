"""Data-parallel groups with PyTorch DDP on CPU: ranks launched the way torchrun launches them
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment; gloo backend), each feeding
from stoker with group="ddp". With 2 and 4 ranks the model trains (loss falls), every rank runs
the same number of steps and receives the end at the same step, the ranks' identities are
disjoint and their union is what the broker acknowledged, and the leftover (producers' total
not divisible by world x batch) is reported, not dropped. Killing one rank gives every other
rank stoker.GroupBroken within the trainer timeout. Every process has a hard time bound."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import helpers

helpers.require("numpy")
helpers.require("torch")

import stoker  # noqa: E402

BATCH = 8

# One rank: DDP over gloo, fed by stoker as rank RANK of group "ddp"; writes its record to OUT.
RANK_SCRIPT = r"""
import json, os, sys
import torch, torch.distributed as dist
import stoker
from stoker.torch import StokerIterableDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(10, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
record = {"rank": dist.get_rank(), "losses": [], "ids": [], "end": None, "leftover": None}
client = stoker.Client(sys.argv[1], group="ddp", stall_timeout=20, batch_size=int(sys.argv[2]))
try:
    for batch in client.batches():
        x = torch.from_numpy(batch["input"])
        y = torch.from_numpy(batch["output"])
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        record["losses"].append(loss.item())
        sessions, seqs = batch.identities()
        record["ids"] += [[int(s), int(q)] for s, q in zip(sessions, seqs)]
except stoker.SupplyEnded as e:
    record["end"] = str(e)
    record["leftover"] = e.leftover
client.close()
with open(sys.argv[3], "w") as f:
    json.dump(record, f)
dist.destroy_process_group()
"""

# One rank without DDP: pulls slowly until the group breaks; prints the exception's class.
PULLER_SCRIPT = r"""
import sys, time
import stoker
client = stoker.Client(sys.argv[1], group="g", stall_timeout=20, batch_size=2)
try:
    for batch in client.batches():
        time.sleep(0.01)
    print("END")
except stoker.GroupBroken as e:
    print("GroupBroken:", e)
    sys.stdout.flush()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script, args, rank, world, port):
    """A rank as torchrun starts it."""
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    preload = env.get("LD_PRELOAD", "")
    if "libasan" in preload:
        # Under AddressSanitizer (tests/python/meson.build preloads it): gloo throws and catches
        # C++ exceptions while it connects, and ASan's __cxa_throw interceptor needs libstdc++
        # loaded at start to find the real one.
        import ctypes.util
        stdcxx = ctypes.util.find_library("stdc++")
        if stdcxx:
            env["LD_PRELOAD"] = preload + ":" + stdcxx
    return subprocess.Popen([sys.executable, "-c", script] + args, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)



reap = helpers.reap


def ddp_run(world, examples, producers=2):
    with helpers.Cluster() as c:
        per = examples // producers
        total = per * producers
        for _ in range(producers):
            c.producer("--delay", "0:0", "--max-examples", str(per), "--chunk", "16")
        port = free_port()
        outs = [os.path.join(c.dir, "rank%d.json" % r) for r in range(world)]
        procs = [launch(RANK_SCRIPT, [c.url, str(BATCH), outs[r]], r, world, port)
                 for r in range(world)]
        for rc, out, err in reap(procs, 90):
            assert rc == 0, "a rank failed:\n" + err[-3000:]
        records = [json.load(open(o)) for o in outs]
        st = stoker.status(c.url)
        return total, records, st


def check_ddp(world, examples):
    total, records, st = ddp_run(world, examples)
    steps = [len(r["losses"]) for r in records]
    assert len(set(steps)) == 1, "ranks ran different numbers of steps: %s" % steps
    assert steps[0] > 10, steps
    ids = [tuple(i) for r in records for i in r["ids"]]
    assert len(ids) == len(set(ids)), "an example went to two ranks"
    acked = st["counters"]["acknowledged"]
    assert len(ids) == acked, "ranks trained %d examples, the broker acknowledged %d" % (
        len(ids), acked)
    leftover = total - acked
    assert leftover < world, "%d examples not handed out (fewer than %d expected)" % (
        leftover, world)
    for r in records:
        assert r["end"] is not None, "rank %d did not see the end" % r["rank"]
        assert r["leftover"] == leftover, (r["leftover"], leftover)
        assert "%d example%s left over" % (leftover, "" if leftover == 1 else "s") in r["end"], \
            r["end"]
        assert "ended at step %d" % steps[0] in r["end"], r["end"]
    group = [g for g in st["groups"] if g["name"] == "ddp"][0]
    assert group["state"] == "ended" and group["leftover"] == leftover, group
    assert st["counters"]["queued"] == leftover, "the leftover is still queued, not dropped"
    # One model (DDP): the loss of a step averaged over the ranks falls.
    per_step = [sum(r["losses"][k] for r in records) / world for k in range(steps[0])]
    first, last = sum(per_step[:3]) / 3, sum(per_step[-10:]) / 10
    assert last < 0.8 * first, "the loss did not fall: %.4f in the first 3 steps, %.4f in the " \
        "last 10" % (first, last)


def test_ddp_two_ranks_equal_steps_common_end():
    # 2 x 505 = 1010 = 63 x 16 + 2: a short last step of 1 example per rank, nothing left over.
    check_ddp(2, 1010)


def test_ddp_four_ranks_leftover_reported():
    # 2 x 503 = 1006 = 31 x 32 + 14: a short last step of 3 per rank, 2 left over.
    check_ddp(4, 1006)


def test_killed_rank_breaks_the_group_for_the_others():
    with helpers.Cluster("--trainer-timeout", "2") as c:
        c.producer("--delay", "0.001:0.001", "--chunk", "4")
        procs = [launch(PULLER_SCRIPT, [c.url], r, 3, 0) for r in range(3)]
        deadline = time.monotonic() + 20
        while True:  # all three ranks are in and steps are flowing
            groups = stoker.status(c.url)["groups"]
            if groups and groups[0]["joined"] == 3 and groups[0]["steps"] >= 5:
                break
            assert time.monotonic() < deadline, "the group did not start: %s" % groups
            time.sleep(0.05)
        killed = time.monotonic()
        procs[2].send_signal(signal.SIGKILL)
        outs = reap(procs[:2], 2 + 5)
        took = time.monotonic() - killed
        procs[2].wait()
        for rc, out, err in outs:
            assert rc == 0, err[-2000:]
            assert out.startswith("GroupBroken:"), out + err[-2000:]
            assert "rank 2" in out, out
        assert took < 2 + 3, "GroupBroken came %.1f s after the kill" % took
        st = stoker.status(c.url)
        groups = st["groups"]
        assert groups[0]["state"] == "broken", groups
        # Why and when, for the live page's timeline.
        assert "rank 2" in groups[0]["end_reason"], groups
        assert 0 < groups[0]["ended_at"] <= st["uptime_s"], (groups, st["uptime_s"])


# One rank of a re-formed group: takes STEPS batches, says its steps and its time to join, then
# waits (bounded) for the test's "go" file before leaving, so the other rank is not broken early.
REFORM_SCRIPT = r"""
import os, sys, time
import stoker
t0 = time.monotonic()
client = stoker.Client(sys.argv[1], group="g", stall_timeout=20, batch_size=2)
joined = time.monotonic() - t0
steps = 0
for batch in client.batches():
    steps += 1
    if steps == 5:
        break
print("STEPS %d joined after %.1f s" % (steps, joined))
sys.stdout.flush()
open(sys.argv[2], "w").close()
deadline = time.monotonic() + 20
while not os.path.exists(sys.argv[3]) and time.monotonic() < deadline:
    time.sleep(0.05)
client.close()
"""


# Defect 8: the old group's ranks hang (SIGSTOP: connections open, silent; a hung or partitioned
# node) and a new group starts under the same name: its ranks take the silent ranks over (within
# half the trainer timeout of the last heartbeat) instead of exiting "already held", and the new
# group starts at step 1.
def test_group_reforms_while_the_old_ranks_hang():
    with helpers.Cluster("--trainer-timeout", "12") as c:
        c.producer("--delay", "0:0", "--chunk", "4", stdout=subprocess.DEVNULL)
        old = [launch(PULLER_SCRIPT.replace("time.sleep(0.01)", "time.sleep(0.05)"), [c.url],
                      r, 2, 0) for r in range(2)]
        deadline = time.monotonic() + 20
        while True:
            groups = stoker.status(c.url)["groups"]
            if groups and groups[0]["joined"] == 2 and groups[0]["steps"] >= 5:
                break
            assert time.monotonic() < deadline, "the old group did not start: %s" % groups
            time.sleep(0.05)
        for p in old:
            p.send_signal(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            done = [os.path.join(c.dir, "done%d" % r) for r in range(2)]
            go = os.path.join(c.dir, "go")
            new = [launch(REFORM_SCRIPT, [c.url, done[r], go], r, 2, 0) for r in range(2)]
            while not all(os.path.exists(d) for d in done):
                if any(p.poll() is not None for p in new) or time.monotonic() > t0 + 30:
                    break
                time.sleep(0.05)
            took = time.monotonic() - t0
            every = stoker.status(c.url)["groups"]
            groups = [g for g in every if g["state"] == "open"]
            open(go, "w").close()
            outs = reap(new, 25)
            for rc, out, err in outs:
                assert rc == 0 and out.startswith("STEPS 5"), out + err[-2000:]
            # Taken over at half the trainer timeout (6 s), well before it (12 s).
            assert took < 11, "the new group needed %.1f s" % took
            assert len(groups) == 1 and groups[0]["joined"] == 2, every
            # Counted from step 1: 5 trained, plus what the ranks prefetched before leaving.
            steps = [r["steps"] for r in groups[0]["ranks"]]
            assert all(5 <= s <= 5 + 8 for s in steps), every
            assert any(g["state"] == "broken" for g in every), every
        finally:
            for p in old:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.communicate()


STALL_SCRIPT = r"""
import sys
import stoker
client = stoker.Client(sys.argv[1], group="g", stall_timeout=3, batch_size=32)
try:
    for batch in client.batches():
        pass
except stoker.Stalled as e:
    print("Stalled:", e)
except stoker.GroupBroken as e:
    print("GroupBroken:", e)
"""


# Defect 11: a rank that stalls while its group waits for a full step is told why: the step's
# size, what is queued, how fast examples come (a producer at 5 examples/s, steps of 2 x 32).
def test_stalled_rank_is_told_why_the_group_waits():
    with helpers.Cluster() as c:
        c.producer("--delay", "0.2:0.2", "--chunk", "1", stdout=subprocess.DEVNULL)
        c.wait_producers(1)
        outs = reap([launch(STALL_SCRIPT, [c.url], r, 2, 0) for r in range(2)], 30)
        said = [out for rc, out, err in outs if out.startswith("Stalled:")]
        assert said, outs
        for out in said:
            assert "waits for a full step" in out and "64 examples (2 ranks x 32)" in out, out
            assert "queued" in out and "examples/s arriving" in out, out


def test_group_arguments_from_the_environment():
    os.environ["RANK"], os.environ["WORLD_SIZE"] = "1", "3"
    try:
        c = stoker.Client("ipc:///nonexistent", group="g")
        assert (c.rank, c.world_size) == (1, 3)
        os.environ["RANK"] = "3"
        try:
            stoker.Client("ipc:///nonexistent", group="g")
            raise AssertionError("rank 3 of 3 accepted")
        except ValueError as e:
            assert "outside the world size" in str(e), e
    finally:
        del os.environ["RANK"], os.environ["WORLD_SIZE"]
    try:
        stoker.Client("ipc:///nonexistent", group="g")
        raise AssertionError("a group without RANK accepted")
    except ValueError as e:
        assert "RANK is not set" in str(e), e


def test_same_rank_twice_is_refused_at_hello():
    with helpers.Cluster() as c:
        c.producer("--delay", "0.01:0.01")
        a = stoker.Client(c.url, group="g", rank=0, world_size=2, batch_size=2)
        try:
            stoker.Client(c.url, group="g", rank=0, world_size=2, batch_size=2)
            raise AssertionError("rank 0 accepted twice")
        except stoker.StokerError as e:
            assert "rank 0 is already held" in str(e), e
        try:
            stoker.Client(c.url, group="g", rank=1, world_size=2, batch_size=4)
            raise AssertionError("a different batch size accepted")
        except stoker.StokerError as e:
            assert "disagree on the batch size" in str(e), e
        a.close()


def test_stoker_pull_ranks_equal_lines_and_exit_5_on_a_lost_rank():
    with helpers.Cluster() as c:
        c.producer("--delay", "0:0", "--max-examples", "101", "--chunk", "8")
        pulls = [subprocess.Popen([helpers.PULL, "--broker", c.url, "--group", "p", "--rank",
                                   str(r), "--world", "2", "--batch-size", "4",
                                   "--stall-timeout", "20"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(2)]
        outs = reap(pulls, 30)
        lines = [len(out.splitlines()) for rc, out, err in outs]
        for rc, out, err in outs:
            assert rc == 3, (rc, err)
            assert "1 example left over" in err, err
        # 101 = 12 steps of 2 x 4, a short step of 2 x 2, 1 left over.
        assert lines == [50, 50], lines
    with helpers.Cluster("--trainer-timeout", "2") as c:
        c.producer("--delay", "0.001:0.001")
        pulls = [subprocess.Popen([helpers.PULL, "--broker", c.url, "--group", "q", "--rank",
                                   str(r), "--world", "2", "--batch-size", "2"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        deadline = time.monotonic() + 20
        while True:
            groups = stoker.status(c.url)["groups"]
            if groups and groups[0]["steps"] >= 3:
                break
            assert time.monotonic() < deadline, "the group did not start: %s" % groups
            time.sleep(0.05)
        pulls[1].kill()
        rc, out, err = reap(pulls[:1], 5)[0]
        pulls[1].wait()
        assert rc == 5, (rc, err)
        assert "rank 1" in err, err


helpers.run(globals())
