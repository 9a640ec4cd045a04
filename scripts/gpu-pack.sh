#!/usr/bin/env bash
# Packs the GPU checks' binaries, built here with CUDA, and the libraries they need that a GPU
# machine may lack (nng, protobuf-c, criterion, OpenBLAS, ...; not glibc, not CUDA's own), for
# `STOKER_GPU_CHECK_PREBUILT=DIR scripts/gpu-check.sh` on a machine that has CUDA but not the
# project's other dependencies (and bench/bench.py with STOKER_BUILD=DIR, STOKER_LIB=DIR/common/libstoker.so.0.1.0).
# Usage: scripts/gpu-pack.sh DIR   (env: BUILD, default build-gpu)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-"$ROOT/build-gpu"}
PACK=${1:?usage: scripts/gpu-pack.sh DIR}
# trainer/libstoker-cuda.so is the CUDA backend (a plugin the trainer opens from beside itself,
# and test_trainer_gpu through STOKER_CUDA_PLUGIN): the only binary here that links CUDA.
BINS=(tests/trainer/test_trainer_gpu tests/trainer/test_trainer_backend tests/trainer/test_trainer_mlp
    trainer/stoker-trainer trainer/libstoker-cuda.so server/stoker-broker producer/stoker-producer
    bench/stoker-bench-producer bench/stoker-bench-consumer bench/nng-raw common/libstoker.so.0.1.0)

[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" -Dcuda=enabled
grep -q "STOKER_HAS_CUDA 1" "$BUILD/config.h" || { echo "gpu-pack: $BUILD is not built with CUDA" >&2; exit 1; }
ninja -C "$BUILD" "${BINS[@]}"
rm -rf "$PACK" && mkdir -p "$PACK/lib"
for b in "${BINS[@]}"; do
    mkdir -p "$PACK/$(dirname "$b")" && cp "$BUILD/$b" "$PACK/$b"
done
# Every library the binaries load, but the C runtime's and CUDA's (the GPU machine's own match
# its driver).
for b in "${BINS[@]}"; do ldd "$BUILD/$b"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*|libstdc\+\+|libgcc_s)\.so|/libcu(da|blas)' |
    while read -r lib; do cp -L "$lib" "$PACK/lib/"; done
# Without their symbols: the pack travels to the GPU machine, and its size is what limits that.
find "$PACK" -type f -exec strip --strip-unneeded {} +
du -sh "$PACK"
