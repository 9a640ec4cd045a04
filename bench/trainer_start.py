#!/usr/bin/env python3
"""stoker-trainer's start-up time: `--version` and a one-step `--device cpu` run, each timed as a
whole process (fork, exec, dynamic loading, run, exit), median of N runs, interleaved between the
trainers given so that the machine's load touches all alike.

    python3 bench/trainer_start.py [--runs N] NAME=PATH [NAME=PATH ...]

e.g. the CUDA plugin's trainer against one that links cudart/cuBLAS at load time:
    python3 bench/trainer_start.py plugin=build/trainer/stoker-trainer linked=/tmp/old-trainer
Also prints whether each links a CUDA library (ldd)."""
import argparse
import statistics
import subprocess
import time

CMDS = {
    "--version": ["--version"],
    "--device cpu, 1 step": ["--inline", "--delay", "0:0", "--rounds", "1", "--round-length", "64",
                             "--batch-size", "64", "--hidden", "16", "--device", "cpu",
                             "--progress", "off", "--log-level", "warn"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("trainers", nargs="+", metavar="NAME=PATH")
    a = ap.parse_args()
    trainers = [t.split("=", 1) for t in a.trainers]
    times = {(n, c): [] for n, _ in trainers for c in CMDS}
    for _ in range(a.runs):
        for c, args in CMDS.items():
            for n, path in trainers:
                t0 = time.perf_counter()
                subprocess.run([path] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               check=True)
                times[(n, c)].append(time.perf_counter() - t0)
    for n, path in trainers:
        ldd = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        cuda = sorted({l.split()[0] for l in ldd.splitlines() if "libcu" in l})
        print(f"{n}: {path}: CUDA libraries linked: {', '.join(cuda) or 'none'}")
    print(f"| command | " + " | ".join(f"{n} median (min) ms" for n, _ in trainers) + " |")
    print("| --- |" + " --- |" * len(trainers))
    for c in CMDS:
        cells = []
        for n, _ in trainers:
            t = times[(n, c)]
            cells.append(f"{1000 * statistics.median(t):.1f} ({1000 * min(t):.1f})")
        print(f"| `{c}` | " + " | ".join(cells) + " |")
    if len(trainers) == 2:
        for c in CMDS:
            r = statistics.median(times[(trainers[1][0], c)]) / statistics.median(
                times[(trainers[0][0], c)])
            print(f"{c}: {trainers[1][0]} / {trainers[0][0]} = {r:.1f}x")


if __name__ == "__main__":
    main()
