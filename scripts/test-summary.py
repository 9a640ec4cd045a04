#!/usr/bin/env python3
"""Counts test cases from meson's testlog.json files: criterion suites by their own Synthesis
line, other tests one each. Prints the plain closing line "N passed, N failed, N skipped" and
exits 1 when anything failed.

    test-summary.py LOG [LOG ...]   the logs of separate meson test runs (e.g. the chaos suite's)"""
import json
import re
import sys

SYNTH = re.compile(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)")

def load(path):
    tests = {}
    with open(path) as f:
        for line in f:
            t = json.loads(line)
            tests[t["name"]] = t
    return tests


OK = ("OK", "SKIP", "EXPECTEDFAIL")


def skip_reason(out):
    """The reason a skipped test printed: its line that says skip, else its last line."""
    lines = [l.strip() for l in out.splitlines() if l.strip()]
    for l in reversed(lines):
        if "skip" in l.lower():
            return l[:300]
    return lines[-1][:300] if lines else "(it printed no reason)"

tests = {}
for path in sys.argv[1:]:
    tests.update(load(path))

passed = failed = skipped = 0
failures = []
skips = []
for t in tests.values():
    out = (t.get("stdout") or "") + (t.get("stderr") or "")
    m = SYNTH.findall(out)
    result = t.get("result")
    if m:
        tested, ok, bad, crashed = map(int, m[-1])
        passed += ok
        failed += bad + crashed
        if result not in ("OK", "EXPECTEDFAIL") and bad + crashed == 0:
            failed += 1  # the binary failed outside any test (e.g. a leak check)
    elif result == "SKIP":
        skipped += 1
        skips.append(f"{t.get('name')}: {skip_reason(out)}")
    elif result in ("OK", "EXPECTEDFAIL"):
        passed += 1
    else:
        failed += 1
    if result not in ("OK", "SKIP", "EXPECTEDFAIL"):
        failures.append((t.get("name"), result, out))
for line in skips:
    print("skipped:", line)
for name, _, out in failures:
    # The end of what a failed test printed: the run's own log may be gone with its machine.
    tail = [l for l in out.splitlines() if l.strip()][-40:]
    print(f"--- the last {len(tail)} lines {name} printed ---")
    for line in tail:
        print("   ", line[:400])
for name, result, _ in failures:
    print(f"failed: {name}: {result}")
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
