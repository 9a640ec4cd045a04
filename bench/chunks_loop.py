#!/usr/bin/python3
"""One side of `bench.py --only chunks`: examples/s into a batch-256 Python loop that touches
every batch, either from a stoker broker (stoker.Client) or from a PyTorch DataLoader whose
workers generate the synthetic workload in Python (bench/python_bench.py's). Prints one JSON line.

    /usr/bin/python3 bench/chunks_loop.py stoker URL SECONDS [BATCH FIELD]
    /usr/bin/python3 bench/chunks_loop.py dataloader WORKERS SECONDS

Measures from the end of the first second (connections, workers' start) for SECONDS. With
stoker it adds the broker's examples accepted per push (the producers' mean chunk) and the
batches delivered in place from shared memory; BATCH (default 256) and FIELD (default input, the
field whose rows are counted) fit it to other schemas (bench.py --only defaults: 150 KB
images, batch 32)."""
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("STOKER_BUILD", "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
os.environ.setdefault("STOKER_LIB", os.path.join(BUILD, "common", "libstoker.so"))
BATCH = 256
WARMUP_S = 1.0


def loop(batches, seconds, field="input"):
    """examples/s over `seconds` after WARMUP_S, touching each batch's field."""
    start = time.monotonic()
    t0, n = None, 0
    for b in batches:
        rows = b[field].shape[0]
        now = time.monotonic()
        if t0 is None:
            if now - start >= WARMUP_S:
                t0 = now
            continue
        n += rows
        if now - t0 >= seconds:
            return n / (now - t0)
    raise RuntimeError("the supply ended before the measurement did")


def main():
    mode = sys.argv[1]
    if mode == "stoker":
        import stoker
        url, seconds = sys.argv[2], float(sys.argv[3])
        batch = int(sys.argv[4]) if len(sys.argv) > 4 else BATCH
        field = sys.argv[5] if len(sys.argv) > 5 else "input"
        with stoker.Client(url, batch_size=batch, stall_timeout=10) as client:
            eps = loop(client.batches(), seconds, field)
            st = client.status()
        accepted = sum(p["accepted"] for p in st["producers"])
        pushes = sum(p["pushes"] for p in st["producers"])
        c = st["counters"]
        print(json.dumps({"examples_per_second": eps, "examples_per_push":
                          accepted / pushes if pushes else 0.0,
                          "delivered_in_place_fraction": c.get("delivered_in_place", 0) /
                          max(1, c.get("delivered", 0))}))
    else:
        import torch.utils.data
        from python_bench import SyntheticDataset
        workers, seconds = int(sys.argv[2]), float(sys.argv[3])
        loader = torch.utils.data.DataLoader(SyntheticDataset(0.0, 0.0), batch_size=BATCH,
                                             num_workers=workers)
        print(json.dumps({"examples_per_second": loop(iter(loader), seconds)}))
        os._exit(0)  # the workers' infinite iterators: do not wait for them


if __name__ == "__main__":
    main()
