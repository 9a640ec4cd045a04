#!/usr/bin/env bash
# What to run on a machine with an NVIDIA GPU: builds the trainer core with CUDA and runs the
# GPU-against-CPU tests (tests/trainer/test_gpu.c), writing logs and a summary under "$OUT"
# (default ./gpu-out). Usage: scripts/gpu-check.sh   (env: OUT, BUILD, STOKER_GPU_CHECK_DIRECT)
#
# Assumptions, checked rather than trusted (the lent GPU machine is not this Debian box):
# - nvcc (CUDA 12+, Hopper sm_90 or newer GPU) is on PATH or in /usr/local/cuda/bin, with cudart
#   and cuBLAS beside it. A C compiler (cc) is installed.
# - The full meson build needs nng, protobuf-c (and criterion for the CPU tests). Where
#   `meson setup -Dcuda=enabled` fails for lack of them, the script compiles the trainer core
#   and test_gpu.c directly (nvcc + cc, no meson, no libstoker code, plain-loop CPU reference),
#   which needs none of them. STOKER_GPU_CHECK_DIRECT=1 forces that path.
# - Exit status: 0 all GPU tests passed, 77 no usable GPU (skipped), anything else a failure;
#   "$OUT/summary.txt" says which, in one line.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-"$ROOT/gpu-out"}
BUILD=${BUILD:-"$ROOT/build-gpu"}
mkdir -p "$OUT"
cd "$ROOT" || exit 1

log() { echo "gpu-check: $*" | tee -a "$OUT/gpu-check.log"; }
finish() { # status word, exit code
    echo "$1" > "$OUT/summary.txt"
    log "result: $1"
    exit "$2"
}

if ! command -v nvcc > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
fi
{
    echo "== date"; date -u
    echo "== os"; cat /etc/os-release 2>/dev/null | head -3
    echo "== nvidia-smi"; nvidia-smi 2>&1 | head -20
    echo "== nvcc"; nvcc --version 2>&1 | tail -2
    echo "== cc"; cc --version 2>&1 | head -1
    echo "== meson"; meson --version 2>&1
    echo "== libraries"
    for h in nng/nng.h protobuf-c/protobuf-c.h criterion/criterion.h cblas.h; do
        if echo "#include <$h>" | cc -E -x c - > /dev/null 2>&1; then echo "$h yes"; else echo "$h no"; fi
    done
} > "$OUT/env.txt" 2>&1
command -v nvcc > /dev/null || finish "FAIL: nvcc not found (see env.txt)" 1

run_gpu_test() { # path of test_trainer_gpu
    log "running $1"
    "$1" > "$OUT/test_gpu.log" 2>&1
    local rc=$?
    cat "$OUT/test_gpu.log"
    case $rc in
    0) finish "PASS: $(tail -1 "$OUT/test_gpu.log")" 0 ;;
    77) finish "$(grep -m1 SKIP "$OUT/test_gpu.log")" 77 ;;
    *) finish "FAIL: test_gpu exited $rc: $(tail -1 "$OUT/test_gpu.log")" 1 ;;
    esac
}

# ---- path 1: the project's meson build ----
if [ "${STOKER_GPU_CHECK_DIRECT:-0}" != 1 ] && command -v meson > /dev/null; then
    log "meson setup $BUILD -Dcuda=enabled"
    if meson setup --wipe "$BUILD" -Dcuda=enabled > "$OUT/meson-setup.log" 2>&1 ||
        meson setup "$BUILD" -Dcuda=enabled > "$OUT/meson-setup.log" 2>&1; then
        targets=(tests/trainer/test_trainer_gpu)
        grep -q "criterion tests: YES" "$OUT/meson-setup.log" &&
            targets+=(tests/trainer/test_trainer_backend tests/trainer/test_trainer_mlp)
        if ninja -C "$BUILD" "${targets[@]}" > "$OUT/build.log" 2>&1; then
            # The CPU reference tests too, when criterion was there to build them.
            meson test -C "$BUILD" --suite trainer --no-rebuild --print-errorlogs \
                > "$OUT/meson-test.log" 2>&1
            log "meson test --suite trainer: exit $? (see meson-test.log)"
            cp "$BUILD/meson-logs/testlog.txt" "$OUT/" 2>/dev/null
            run_gpu_test "$BUILD/tests/trainer/test_trainer_gpu"
        fi
        log "meson build failed (see build.log); trying the direct build"
    else
        log "meson setup failed (see meson-setup.log: missing nng/protobuf-c?); trying the direct build"
    fi
fi

# ---- path 2: direct build of the trainer core and test_gpu.c ----
DIRECT="$BUILD-direct"
rm -rf "$DIRECT" && mkdir -p "$DIRECT" || finish "FAIL: cannot create $DIRECT" 1
cat > "$DIRECT/config.h" << 'EOF'
#define STOKER_HAS_CUDA 1
#define STOKER_HAS_OPENBLAS 0
#define STOKER_VERSION "gpu-check"
EOF
CUDA_ROOT=$(dirname "$(dirname "$(command -v nvcc)")")
CUDA_LIB=""
for d in "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib" "$CUDA_ROOT"/targets/*/lib; do
    [ -e "$d/libcudart.so" ] && CUDA_LIB=$d && break
done
[ -n "$CUDA_LIB" ] || finish "FAIL: libcudart.so not found under $CUDA_ROOT" 1
CFLAGS=(-std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -Wundef -Wshadow -Wno-unused-parameter
    -I "$DIRECT" -I common/include -I trainer -isystem "$CUDA_ROOT/include")
(
    set -x
    nvcc -O2 -gencode 'arch=compute_90,code=[sm_90,compute_90]' -I "$DIRECT" -I common/include \
        -c trainer/kernels.cu -o "$DIRECT/kernels.o" &&
        for f in trainer/backend_cpu.c trainer/backend_cuda.c trainer/mlp.c trainer/safetensors.c \
            tests/trainer/test_gpu.c; do
            cc "${CFLAGS[@]}" -c "$f" -o "$DIRECT/$(basename "$f" .c).o" || exit 1
        done &&
        cc -o "$DIRECT/test_trainer_gpu" "$DIRECT"/*.o -L "$CUDA_LIB" -Wl,-rpath,"$CUDA_LIB" \
            -lcublas -lcudart -lstdc++ -lm
) > "$OUT/build-direct.log" 2>&1 || finish "FAIL: direct build failed (see build-direct.log)" 1
log "direct build done in $DIRECT"
run_gpu_test "$DIRECT/test_trainer_gpu"
