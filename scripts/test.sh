#!/usr/bin/env bash
# The test command: installs what is missing (the build's and the tests' packages), builds, runs
# every test that needs no GPU (GPU tests skip with a reason when no device is present) and ends
# with "N passed, N failed".
#   scripts/test.sh              the suite
#   scripts/test.sh --sanitize   the same under AddressSanitizer + UBSan (build-asan/)
set -uo pipefail
cd "$(dirname "$0")/.."
build=build
opts=()
if [ "${1:-}" = "--sanitize" ]; then
    build=build-asan
    opts=(-Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled)
fi
# The tests' own packages first (scripts/deps.sh test: criterion, clang for the fuzz target,
# torch, docker, debhelper...); a build directory configured before they were present is
# configured again, so the test programs they enable are built.
bash scripts/deps.sh test || { echo "0 passed, 1 failed"; exit 1; }
if [ -f "$build/build.ninja" ] && ! meson test -C "$build" --list 2>/dev/null | grep -q ":core /"; then
    meson setup --reconfigure "$build" >/dev/null || { echo "0 passed, 1 failed"; exit 1; }
fi
STOKER_BUILD=$build bash scripts/build.sh "${opts[@]}" || { echo "0 passed, 1 failed"; exit 1; }
# ASan: leaks are checked by the suites themselves (see tests/core/helpers.c).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# The chaos suite runs alone after the others (it kills and freezes processes at random and
# wants the CPUs to itself); both runs decide the result.
meson test -C "$build" --print-errorlogs --num-processes 2 -t 2 --no-suite chaos 2>&1 | tail -n 40
status=${PIPESTATUS[0]}
logs=("$build/meson-logs/testlog.json")
if meson test -C "$build" --list 2>/dev/null | grep -q ":chaos /"; then
    meson test -C "$build" --print-errorlogs --suite chaos -t 2 --logbase chaoslog 2>&1 | tail -n 60
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    logs+=("$build/meson-logs/chaoslog.json")
fi
python3 scripts/test-summary.py "${logs[@]}"
summary=$?
[ "$status" -eq 0 ] && [ "$summary" -eq 0 ]
