#!/usr/bin/python3
"""The child of `bench.py --only cpu-exec`'s exec producers: CPU-bound examples made with numpy,
written to stdout as raw records of `image:float32[3,32,32],label:int64` (little-endian), the way
a user's generator writes them: the image and the label written one after the other, one flush per
example (CPU_CHILD_ONE_WRITE=1: the record in one write).

    /usr/bin/python3 bench/cpu_child.py ROUNDS [COUNT]

Each example is ROUNDS rounds of a (64, 64) matmul and tanh on its own seed's data (about 2 ms
with the rounds bench.py calibrates), then the image cut from the result. COUNT: stop after
that many (default: until killed) and say on stderr how long they took (start-up not counted):
two of them side by side, their output to /dev/null, give the core-limited ideal.
"""
import os
import sys
import time

import numpy as np


def main():
    rounds = int(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    one_write = os.environ.get("CPU_CHILD_ONE_WRITE") == "1"
    rng = np.random.default_rng()
    w = rng.standard_normal((64, 64)).astype(np.float32) / 8
    out = sys.stdout.buffer
    i = 0
    t0 = time.monotonic()
    while count == 0 or i < count:
        x = rng.standard_normal((64, 64), dtype=np.float32)
        for _ in range(rounds):
            x = np.tanh(x @ w)
        image = np.resize(x, (3, 32, 32))
        if one_write:
            out.write(image.tobytes() + np.int64(i % 10).tobytes())
        else:
            out.write(image.tobytes())
            out.write(np.int64(i % 10).tobytes())
        out.flush()
        i += 1
    if count:  # the rate alone, start-up not counted (bench.py's ideal)
        print("%d examples in %.6f s" % (count, time.monotonic() - t0), file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except (BrokenPipeError, KeyboardInterrupt):
        sys.exit(0)
