#!/usr/bin/python3
"""One rank of `bench.py --only group-commit` or `--only ranks-shm`: a Python process that takes
a fixed number of steps and prints one JSON line. Either a rank of a stoker group, or (for
ranks-shm's baseline) a process with its own PyTorch DataLoader.

    /usr/bin/python3 bench/ranks_loop.py group URL RANK WORLD BATCH WARMUP STEPS EVERY FIELD
    /usr/bin/python3 bench/ranks_loop.py dataloader WORKERS BATCH WARMUP STEPS

group: stoker.Client(URL, group="bench", rank=RANK, world_size=WORLD), batches of BATCH per
rank; EVERY > 0 is group commit (commit=True, every rank calls state_dict() at every EVERY-th
step), EVERY = 0 plain group acknowledgement (commit=False). FIELD is the field touched each
step. dataloader: torch.utils.data.DataLoader(num_workers=WORKERS) over ImageDataset below (the
mirror of `stoker-bench-producer --schema image:uint8[224,224,3] --fill stamp`: generation free,
a ready 150,528-byte image per example; the collate copies it into the batch, the worker hands
the batch over in shared memory).

Every step reads its batch: the field's rows at a 64-byte stride, so every cache line of the
batch is loaded once (the same on both sides). The window is the STEPS steps after WARMUP steps
(CLOCK_MONOTONIC, comparable across processes: t0 and t1 are printed so the caller can take the
group's wall window). After printing, the process waits for a line (or EOF) on stdin before it
closes: a group rank that closed early could break the step of a rank still finishing its
last one.
"""
import json
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("STOKER_BUILD", "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("STOKER_LIB", os.path.join(BUILD, "common", "libstoker.so"))

import numpy as np  # noqa: E402

IMAGE = (224, 224, 3)


def own_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def pid_cpu(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def touch(arr):
    """Reads every cache line of the batch's field (a 64-byte stride over its bytes)."""
    flat = arr.reshape(-1).view(np.uint8)
    return int(flat[::64].sum())


def steps_loop(batches, field, warmup, steps, on_step=None):
    """Takes warmup + steps batches; returns (t0, t1, rows in the window, whether the last
    batch lay in the broker's shared memory (None for a DataLoader's))."""
    t0 = t1 = None
    shared = None
    n = k = 0
    for b in batches:
        arr = b[field]
        arr = arr.numpy() if hasattr(arr, "numpy") else np.asarray(arr)
        touch(arr)
        shared = getattr(b, "shared", None)
        k += 1
        if on_step is not None:
            on_step(k)
        if k == warmup:
            t0 = time.monotonic()
        elif k > warmup:
            n += arr.shape[0]
        if k == warmup + steps:
            t1 = time.monotonic()
            break
    if t1 is None:
        raise RuntimeError("the supply ended after %d of %d steps" % (k, warmup + steps))
    return t0, t1, n, shared


def wait_for_go():
    try:
        sys.stdin.readline()
    except (OSError, ValueError):
        pass


def run_group(argv):
    import stoker
    url = argv[0]
    rank, world, batch, warmup, steps, every = (int(v) for v in argv[1:7])
    field = argv[7]
    client = stoker.Client(url, group="bench", rank=rank, world_size=world, commit=every > 0,
                           stall_timeout=30.0)
    commit = {"n": 0, "s": 0.0}

    def on_step(k):
        if every > 0 and client.group_step % every == 0:
            c0 = time.monotonic()
            client.state_dict()
            commit["s"] += time.monotonic() - c0
            commit["n"] += 1

    cpu0 = own_cpu()
    t0, t1, n, shared = steps_loop(client.batches(batch), field, warmup, steps, on_step)
    out = {"t0": t0, "t1": t1, "examples": n, "steps": client.group_step, "shared": shared,
           "examples_per_second": n / (t1 - t0), "commits": commit["n"],
           "commit_seconds": commit["s"], "cpu_seconds": own_cpu() - cpu0}
    print(json.dumps(out), flush=True)
    wait_for_go()
    client.close()


def run_dataloader(argv):
    import torch
    import torch.utils.data
    workers, batch, warmup, steps = (int(v) for v in argv[:4])
    torch.set_num_threads(1)

    class ImageDataset(torch.utils.data.IterableDataset):
        """Generation free: the same ready image, as bench/python_bench.py --large yields."""

        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            img = torch.from_numpy(np.full(IMAGE, (info.id if info is not None else 0) + 1,
                                           dtype=np.uint8))
            while True:
                yield {"image": img}

    loader = torch.utils.data.DataLoader(ImageDataset(), batch_size=batch, num_workers=workers)
    it = iter(loader)
    pids = [w.pid for w in getattr(it, "_workers", [])]
    cpu0 = own_cpu()
    t0, t1, n, _ = steps_loop(it, "image", warmup, steps)
    # This process's CPU in the loop, plus its workers' over their whole life (they start with
    # the iterator, a second before the loop).
    cpu = own_cpu() - cpu0 + sum(pid_cpu(p) for p in pids)
    print(json.dumps({"t0": t0, "t1": t1, "examples": n, "examples_per_second": n / (t1 - t0),
                      "cpu_seconds": cpu}), flush=True)
    wait_for_go()
    os._exit(0)  # the workers' infinite iterators: do not wait for them


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "group" and len(sys.argv) == 10:
        run_group(sys.argv[2:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "dataloader" and len(sys.argv) == 6:
        run_dataloader(sys.argv[2:])
    else:
        sys.stderr.write(__doc__.split("\n\n")[1] + "\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
