"""Group commit and resuming at another world size: ranks of a group with commit=True
checkpoint together (every rank calls state_dict() at the same step; rank 0 saves it), all ranks
are SIGKILLed between checkpoints, and the group is started again from the checkpoint at another
world size (4 ranks, then 3, then 4). From the ranks' identity logs cut at each checkpoint (what
the model of the lineage trained): each dataset item once per epoch, each stream example once;
the ranks' steps equal within each run; the step count goes on from the checkpoint's. One run
trains a DDP model over gloo with each rank started as torchrun starts it. Real broker,
producers and Python ranks as processes; every wait bounded."""

import json
import os
import socket
import subprocess
import sys
import time

import helpers

helpers.require("numpy")
import stoker  # noqa: E402

# One rank: resumes from the checkpoint file when there is one, logs every step's identities
# (one JSON line per step, flushed), and every `every` steps calls state_dict() (all ranks);
# rank 0 then saves it (write and rename). Ends at the supply's end or when killed.
RANK = r"""
import json, os, sys, time
import stoker
cfg = json.loads(sys.argv[1])
if cfg["ddp"]:
    # As torchrun starts a rank: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment;
    # DDP over gloo; rank 0 saves the model and the stoker state in one file.
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    c = stoker.Client(cfg["url"], group="g", commit=True, stall_timeout=20.0)
    if os.path.exists(cfg["ckpt"]):
        saved = torch.load(cfg["ckpt"])
        model.module.load_state_dict(saved["model"])
        c.load_state_dict(saved["stoker"])
else:
    c = stoker.Client(cfg["url"], group="g", rank=cfg["rank"], world_size=cfg["world"],
                      commit=True, stall_timeout=20.0)
    if os.path.exists(cfg["ckpt"]):
        c.load_state_dict(json.load(open(cfg["ckpt"]))["stoker"])
log = open(cfg["log"], "a")
end = {"end": None, "leftover": None, "error": None}
try:
    for b in c.batches(cfg["batch"]):
        a, z = b.epoch_indices() if cfg["dataset"] else b.identities()
        if cfg["ddp"]:
            loss = torch.nn.functional.mse_loss(model(torch.from_numpy(b["input"])),
                                                torch.from_numpy(b["output"]))
            opt.zero_grad()
            loss.backward()  # the all-reduce: every rank takes the same steps or this hangs
            opt.step()
        b.release()
        steps = c.group_step
        log.write(json.dumps({"step": steps,
                              "items": [[int(x), int(y)] for x, y in zip(a, z)]}) + "\n")
        log.flush()
        time.sleep(cfg["step_s"])
        if steps % cfg["every"] == 0:
            st = c.state_dict()
            if cfg["rank"] == 0:
                tmp = cfg["ckpt"] + ".tmp"
                if cfg["ddp"]:
                    torch.save({"model": model.module.state_dict(), "stoker": st}, tmp)
                else:
                    json.dump({"stoker": st}, open(tmp, "w"))
                os.replace(tmp, cfg["ckpt"])
                open(cfg["ckpt"] + ".step", "w").write(str(st["group_step"]))
except stoker.SupplyEnded as e:
    end["end"] = e.reason
    end["leftover"] = e.leftover
    c.state_dict()
except stoker.StokerError as e:
    end["error"] = "%s: %s" % (type(e).__name__, e)
finally:
    c.close()
json.dump(end, open(cfg["log"] + ".end", "w"))
if cfg["ddp"]:
    dist.destroy_process_group()
"""

BATCH = 8
EVERY = 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(c, world, run, dataset, ddp=False):
    procs, logs = [], []
    port = free_port()
    for r in range(world):
        log = os.path.join(c.dir, "run%d-rank%d.log" % (run, r))
        cfg = {"url": c.url, "rank": r, "world": world, "batch": BATCH, "every": EVERY,
               "ckpt": os.path.join(c.dir, "ckpt"), "log": log, "dataset": dataset,
               "step_s": 0.03, "ddp": ddp}
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        if ddp and "libasan" in env.get("LD_PRELOAD", ""):
            # Under AddressSanitizer gloo's C++ exceptions need libstdc++ preloaded too (as in
            # test_groups.py).
            import ctypes.util
            stdcxx = ctypes.util.find_library("stdc++")
            if stdcxx:
                env["LD_PRELOAD"] += ":" + stdcxx
        procs.append(subprocess.Popen([sys.executable, "-c", RANK, json.dumps(cfg)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        logs.append(log)
    return procs, logs


def ckpt_step(c):
    path = os.path.join(c.dir, "ckpt.step")
    if not os.path.exists(path):
        return 0
    return int(open(path).read() or 0)


def kill_after_checkpoint(c, procs, at_least, timeout=60):
    """Waits for a checkpoint at step >= at_least, then SIGKILLs every rank at once (between
    that checkpoint and the next); returns the checkpoint's step."""
    deadline = time.monotonic() + timeout
    while ckpt_step(c) < at_least:
        assert time.monotonic() < deadline, "no checkpoint at step %d within %d s" % (at_least,
                                                                                        timeout)
        assert all(p.poll() is None for p in procs), "a rank ended early:\n%s" % "".join(
            p.communicate()[1][-2000:] for p in procs if p.poll() is not None)
        time.sleep(0.005)
    step = ckpt_step(c)
    for p in procs:
        p.kill()
    for p in procs:
        p.communicate()
    return step


def read_log(path, first):
    """A rank's steps as it logged them; they count on from the checkpoint's step."""
    lines = [json.loads(line) for line in open(path) if line.endswith("\n")]
    for k, line in enumerate(lines):
        assert line["step"] == first + k + 1, "%s: step %d logged as %d (resumed from %d)" % (
            path, first + k + 1, line["step"], first)
    return [line["items"] for line in lines]


def lineage(runs):
    """runs: [(first_step, cut_step or None, [rank logs])]: the items of every step each run
    took up to its cut (what the resumed model includes), and each run's steps per rank."""
    items, steps = [], []
    for first, cut, logs in runs:
        per_rank = [read_log(log, first) for log in logs]
        steps.append([len(r) for r in per_rank])
        for rank_steps in per_rank:
            taken = rank_steps if cut is None else rank_steps[:cut - first]
            assert cut is None or len(rank_steps) >= cut - first, \
                "a rank logged %d steps from step %d, the checkpoint is at %d" % (
                    len(rank_steps), first, cut)
            for batch in taken:
                items += [tuple(x) for x in batch]
    return items, steps


def kill_and_resume(c, dataset, ddp=False):
    """4 ranks, killed after a checkpoint; 3 ranks resumed from it, killed after a later one; 4
    ranks resumed to the end. Returns the lineage's items, the steps per run, the ends."""
    procs, logs1 = start_ranks(c, 4, 1, dataset, ddp)
    s1 = kill_after_checkpoint(c, procs, 8)
    procs, logs2 = start_ranks(c, 3, 2, dataset, ddp)
    s2 = kill_after_checkpoint(c, procs, s1 + 8)
    procs, logs3 = start_ranks(c, 4, 3, dataset, ddp)
    for rc, _, err in helpers.reap(procs, 120):
        assert rc == 0, "a rank failed:\n" + err[-3000:]
    ends = [json.load(open(log + ".end")) for log in logs3]
    for e in ends:
        assert e["error"] is None, e
        assert e["end"] is not None, e
    items, steps = lineage([(0, s1, logs1), (s1, s2, logs2), (s2, None, logs3)])
    assert len(set(steps[2])) == 1, "the last run's ranks ran different steps: %s" % steps[2]
    assert len({e["leftover"] for e in ends}) == 1, ends
    return items, steps, ends, (s1, s2)


def test_dataset_group_killed_and_resumed_at_3_then_4_ranks_trains_each_item_once_per_epoch():
    size, epochs = 500, 2
    with helpers.Cluster("--dataset-size", str(size), "--epochs", str(epochs)) as c:
        c.producer("--items", str(size), "--delay", "0:0", "--chunk", "4",
                   stdout=subprocess.DEVNULL)
        items, steps, ends, cuts = kill_and_resume(c, True)
        st = stoker.status(c.url)
    twice = sorted({x for x in items if items.count(x) > 1})
    assert not twice, "items trained twice in the lineage: %s" % twice[:10]
    want = {(e, i) for e in range(epochs) for i in range(size)}
    assert set(items) <= want
    missing = want - set(items)
    assert len(missing) == ends[0]["leftover"] == st["counters"]["queued"], \
        "%d never trained, leftover %s, queued %d" % (len(missing), ends[0]["leftover"],
                                                      st["counters"]["queued"])
    print("dataset: checkpoints at steps %s, steps per run and rank %s, %d items trained" % (
        cuts, steps, len(items)))


def test_ddp_over_gloo_killed_and_resumed_at_3_then_4_ranks_trains_each_item_once_per_epoch():
    # The same over a dataset, each rank as torchrun starts it (rank and world from the
    # environment) training a DDP model over gloo, rank 0 saving model and stoker state together.
    import torch  # noqa: F401 (scripts/deps.sh installs python3-torch; the ranks need it)
    size, epochs = 400, 2
    with helpers.Cluster("--dataset-size", str(size), "--epochs", str(epochs)) as c:
        c.producer("--items", str(size), "--delay", "0:0", "--chunk", "4",
                   stdout=subprocess.DEVNULL)
        items, steps, ends, cuts = kill_and_resume(c, True, ddp=True)
        st = stoker.status(c.url)
    twice = sorted({x for x in items if items.count(x) > 1})
    assert not twice, "items trained twice in the lineage: %s" % twice[:10]
    want = {(e, i) for e in range(epochs) for i in range(size)}
    missing = want - set(items)
    assert set(items) <= want and len(missing) == st["counters"]["queued"], \
        "%d never trained, queued %d" % (len(missing), st["counters"]["queued"])
    print("ddp: checkpoints at steps %s, steps per run and rank %s, %d items trained" % (
        cuts, steps, len(items)))


def test_stream_group_killed_and_resumed_at_3_then_4_ranks_trains_each_example_once():
    with helpers.Cluster() as c:
        for _ in range(2):
            c.producer("--max-examples", "500", "--delay", "0:0", "--retain", "1024",
                       stdout=subprocess.DEVNULL)
        c.wait_producers(2)
        items, steps, ends, cuts = kill_and_resume(c, False)
        st = stoker.status(c.url)
    twice = sorted({x for x in items if items.count(x) > 1})
    assert not twice, "examples trained twice in the lineage: %s" % twice[:10]
    sessions = {(int(p["session"], 16) if isinstance(p["session"], str) else p["session"]):
                p["next_seq"] for p in st["producers"]}
    want = {(s, q) for s, n in sessions.items() for q in range(n)}
    assert set(items) <= want
    missing = want - set(items)
    assert len(missing) == st["counters"]["queued"], \
        "%d never trained, %d queued" % (len(missing), st["counters"]["queued"])
    print("stream: checkpoints at steps %s, steps per run and rank %s, %d examples trained" % (
        cuts, steps, len(items)))


def test_resume_with_another_batch_size_per_rank_is_refused():
    with helpers.Cluster() as c:
        c.producer("--max-examples", "100", "--delay", "0:0", stdout=subprocess.DEVNULL)
        client = stoker.Client(c.url, group="g", rank=0, world_size=1, commit=True)
        client.load_state_dict({"stoker": 1, "group": "g", "group_step": 12, "world_size": 4,
                                "rank": 0, "batch_size": 16})
        try:
            client.next_batch(8)
        except ValueError as e:
            assert "batches of 16 per rank" in str(e) and "8" in str(e), str(e)
        else:
            raise AssertionError("a resume with another batch size per rank was taken")
        finally:
            client.close()


helpers.run({k: v for k, v in globals().items() if len(sys.argv) < 2 or k in sys.argv[1:]})
