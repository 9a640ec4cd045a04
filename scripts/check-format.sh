#!/usr/bin/env bash
# Checks that every C source and header is formatted as .clang-format says (clang-format 14,
# Debian 12's). Prints the files that are not and exits 1; exits 0 when all are.
set -uo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format > /dev/null; then
    echo "check-format: installing clang-format" >&2
    STOKER_EXTRA_PKGS=clang-format bash scripts/deps.sh || exit 1
fi
bad=0
for f in $(git ls-files '*.c' '*.h'); do
    if ! clang-format --dry-run --Werror "$f" > /dev/null 2>&1; then
        echo "check-format: $f is not formatted (run: clang-format -i $f)"
        bad=1
    fi
done
[ "$bad" -eq 0 ] && echo "check-format: all C files formatted"
exit "$bad"
