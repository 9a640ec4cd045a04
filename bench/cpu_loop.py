#!/usr/bin/python3
"""The consumer of `bench.py --only cpu-exec`: stoker.Client pulling batches of `image` and
`label` and touching every value (a sum), as a training loop's first op would. Prints
"measuring" when its measurement starts (bench.py samples the processes' CPU time then), then
one JSON line: examples made per second over SECONDS after WARMUP_S from its first batch (the
broker's produced counter: what the loop takes also drains the queues filled before it came,
which would count more than the producers make), and the loop's own rate.

    /usr/bin/python3 bench/cpu_loop.py URL WARMUP_S SECONDS BATCH_SIZE
"""
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("STOKER_BUILD", "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("STOKER_LIB", os.path.join(BUILD, "common", "libstoker.so"))


def main():
    import numpy as np
    import stoker
    url, warmup, seconds, batch = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(
        sys.argv[4])
    first = t0 = None
    n = 0
    with stoker.Client(url, stall_timeout=30) as client:
        for b in client.batches(batch):
            np.asarray(b["image"]).sum()
            count = len(np.asarray(b["label"]))
            b.release()
            now = time.monotonic()
            if first is None:
                first = now
            if t0 is None:
                if now - first >= warmup:
                    t0 = now
                    made0 = stoker.status(url)["counters"]["produced"]
                    print("measuring", flush=True)
                continue
            n += count
            if now - t0 >= seconds:
                made = stoker.status(url)["counters"]["produced"] - made0
                now = time.monotonic()
                print(json.dumps({"examples_per_second": made / (now - t0), "examples": made,
                                  "consumed_per_second": n / (now - t0),
                                  "seconds": now - t0}), flush=True)
                return
    sys.exit("cpu_loop: the supply ended before the measurement did")


if __name__ == "__main__":
    main()
