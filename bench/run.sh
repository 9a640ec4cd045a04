#!/usr/bin/env bash
# The benchmark entry point: installs what is missing, builds, runs every benchmark side by side
# with its baseline and prints the table (figures with their targets) and the JSON file's path.
#   bench/run.sh [--quick] [--only seed,floor,large,wait,detect,images,images_tv]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec python3 bench/bench.py "$@"
