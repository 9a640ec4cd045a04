#!/usr/bin/env python3
"""Two builds of stoker side by side: bench.py's floor and large benchmarks run against build A
and build B in turns (A, B, B, A, ...), and each figure is reported as B / A, the median over
the rounds. For a change that should not move performance (a refactor): build the tree before it
into another folder and compare.

    python3 bench/compare_builds.py OLD_BUILD NEW_BUILD [--rounds N] [--only floor,large] [--full]

The builds are folders that hold server/stoker-broker, bench/stoker-bench-producer,
bench/stoker-bench-consumer and bench/nng-raw (scripts/build.sh makes them). --quick runs of
bench.py unless --full."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def figures(result):
    """{name: value} of the figures compared: examples/s of each floor configuration, stoker's
    MB/s for 1, 2 and 4 large producers (shared memory) and over the socket."""
    out = {}
    bench = result["benchmarks"]
    for c in bench.get("floor", {}).get("configs", []):
        out["floor %s P=%d examples/s" % (c["transport"], c["producers"])] = \
            c["examples_per_second"]
    large = bench.get("large")
    if large:
        for p, v in sorted(large["by_producers"].items()):
            out["large P=%s shm MB/s" % p] = statistics.median(v["stoker_mb_s"])
        out["large socket MB/s"] = large["stoker_socket"]["bytes_per_second"] / 1e6
    return out


def run(build, only, full):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    cmd = [sys.executable, os.path.join(HERE, "bench.py"), "--only", only, "--json", path]
    if not full:
        cmd.append("--quick")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "STOKER_BUILD": os.path.abspath(build)})
    with open(path) as f:
        res = json.load(f)
    os.unlink(path)
    return figures(res)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="the build before (folder)")
    ap.add_argument("b", help="the build after (folder)")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each build (default 2)")
    ap.add_argument("--only", default="floor,large")
    ap.add_argument("--full", action="store_true", help="full-size runs, not --quick")
    ap.add_argument("--json", default=None, help="where to write the figures")
    opts = ap.parse_args()
    for build in (opts.a, opts.b):
        if not os.path.exists(os.path.join(build, "server", "stoker-broker")):
            sys.exit("compare_builds: %s has no server/stoker-broker (build it first)" % build)
    runs = {"a": [], "b": []}
    for k in range(opts.rounds):
        order = ("a", "b") if k % 2 == 0 else ("b", "a")
        for which in order:
            runs[which].append(run(getattr(opts, which), opts.only, opts.full))
            print("round %d: %s done" % (k + 1, which), file=sys.stderr)
    names = sorted(set(runs["a"][0]) & set(runs["b"][0]))
    rows = []
    print("%-34s %14s %14s %8s" % ("figure (median of %d runs)" % opts.rounds, "A", "B", "B / A"))
    for n in names:
        a = statistics.median(r[n] for r in runs["a"])
        b = statistics.median(r[n] for r in runs["b"])
        rows.append({"figure": n, "a": a, "b": b, "ratio": b / a})
        print("%-34s %14.4g %14.4g %8.3f" % (n, a, b, b / a))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"a": opts.a, "b": opts.b, "rounds": opts.rounds, "rows": rows,
                       "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
