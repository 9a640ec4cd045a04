#!/usr/bin/env bash
# Installs what is missing (Debian 12, as root) and builds stoker into ${STOKER_BUILD:-build}.
# Extra meson options can be passed as arguments, e.g. scripts/build.sh -Dcuda=disabled.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
build=${STOKER_BUILD:-build}
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$@" >/dev/null
elif [ $# -gt 0 ]; then
    meson configure "$build" "$@" >/dev/null
fi
ninja -C "$build" >/dev/null || ninja -C "$build"
echo "build: ok ($build)" >&2
