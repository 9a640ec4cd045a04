#!/usr/bin/python3
"""One run of `bench.py --only buckets`: a loop that pulls token sequences from a broker with
stoker.Client and pads each batch to its longest (Ragged.pad, what a model gets), and prints one
JSON line: real tokens per second (padding not counted), the padding fraction (padded slots /
all slots), batches, and the seconds from the client's start to its first batch.

    /usr/bin/python3 bench/buckets_loop.py URL WARMUP_S SECONDS BATCH_SIZE MAX_TOKENS BUCKETS

BATCH_SIZE 0: none (by tokens only); MAX_TOKENS 0: none; BUCKETS 0 or 1. Measures from WARMUP_S
after the first batch for SECONDS.
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
    url, warmup, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    batch_size, max_tokens, buckets = (int(x) for x in sys.argv[4:7])
    import stoker
    kw = {"buckets": bool(buckets)}
    if max_tokens:
        kw["max_tokens"] = max_tokens
    start = time.monotonic()
    first = t0 = None
    real = slots = n = 0
    with stoker.Client(url, stall_timeout=30, **kw) as client:
        for b in client.batches(batch_size or None):
            padded, _ = b["tokens"].pad(pad_value=0)
            r_real, r_slots = int(b["tokens"].offsets[-1]), padded.size
            b.release()
            now = time.monotonic()
            if first is None:
                first = now
            if t0 is None:
                if now - first >= warmup:
                    t0 = now
                continue
            real += r_real
            slots += r_slots
            n += 1
            if now - t0 >= seconds:
                print(json.dumps({"tokens_per_second": real / (now - t0),
                                  "padding_fraction": 1.0 - real / slots if slots else 0.0,
                                  "batches": n, "first_batch_s": first - start}))
                return
    sys.exit("buckets_loop: the supply ended before the measurement did")


if __name__ == "__main__":
    main()
