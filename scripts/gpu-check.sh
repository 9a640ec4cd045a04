#!/usr/bin/env bash
# What to run on a machine with an NVIDIA GPU: builds the trainer core and its CUDA backend plugin
# (libstoker-cuda.so, which the trainer and test_trainer_gpu open at run time: neither links CUDA
# itself) and runs the GPU-against-CPU tests (tests/trainer/test_gpu.c) through the plugin and, with the full build, a GPU training
# benchmark against the CPU, writing logs and a summary under "$OUT"
# (default ./gpu-out). Usage: scripts/gpu-check.sh   (env: OUT, BUILD, STOKER_GPU_CHECK_DIRECT,
# STOKER_GPU_CHECK_PREBUILT=DIR: run the binaries that scripts/gpu-pack.sh packed instead of building)
#
# Assumptions, checked rather than trusted (the lent GPU machine is not this Debian box):
# - nvcc (CUDA 12+, Hopper sm_90 or newer GPU) is on PATH or in /usr/local/cuda/bin, with cudart
#   and cuBLAS beside it. A C compiler (cc) is installed.
# - The full meson build needs nng, protobuf-c (and criterion for the CPU tests). Where
#   `meson setup -Dcuda=enabled` fails for lack of them, the script compiles the trainer core
#   and test_gpu.c directly (nvcc + cc, no meson, plain-loop CPU reference; of libstoker only
#   common/base/error.c, which is plain C), which needs none of them.
#   STOKER_GPU_CHECK_DIRECT=1 forces that path.
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

run_gpu_test() { # path of test_trainer_gpu, path of the plugin libstoker-cuda.so
    log "running $1 with STOKER_CUDA_PLUGIN=$2"
    [ -e "$2" ] || finish "FAIL: the CUDA backend plugin $2 was not built" 1
    STOKER_CUDA_PLUGIN=$2 timeout 300 "$1" > "$OUT/test_gpu.log" 2>&1
    local rc=$?
    cat "$OUT/test_gpu.log"
    case $rc in
    0) [ -n "$PINNED_FAIL" ] && finish "FAIL: $PINNED_FAIL (GPU tests passed)" 1
       finish "PASS: $(tail -1 "$OUT/test_gpu.log")${PINNED_OK:+; $PINNED_OK}" 0 ;;
    77) finish "$(grep -m1 SKIP "$OUT/test_gpu.log")" 77 ;;
    *) finish "FAIL: test_gpu exited $rc: $(tail -1 "$OUT/test_gpu.log")" 1 ;;
    esac
}

# The GPU training benchmark: the same MLP training (inline synthetic data with zero generation
# cost, so the step itself is measured) on the GPU and on the CPU, side by side.
run_gpu_bench() { # path of stoker-trainer
    local trainer=$1 common=(--inline --delay 0:0 --batch-size 1024 --hidden 1024,1024
        --round-length 102400 --progress off --log-level warn)
    [ -x "$trainer" ] || { log "no stoker-trainer built: GPU benchmark skipped"; return; }
    log "GPU training benchmark (batch 1024, hidden 1024,1024)"
    timeout 120 "$trainer" "${common[@]}" --rounds 20 --device gpu --json "$OUT/bench-gpu.json" \
        > "$OUT/bench-gpu.log" 2>&1
    timeout 120 "$trainer" "${common[@]}" --rounds 2 --device cpu --json "$OUT/bench-cpu.json" \
        > "$OUT/bench-cpu.log" 2>&1
    python3 - "$OUT/bench-gpu.json" "$OUT/bench-cpu.json" > "$OUT/bench.txt" 2>&1 << 'PY'
import json, sys
g, c = (json.load(open(p)) for p in sys.argv[1:3])
print(f"gpu {g['device']}: {g['examples_per_second']:.0f} examples/s ({g['status']}); "
      f"cpu: {c['examples_per_second']:.0f} examples/s; ratio {g['examples_per_second'] / c['examples_per_second']:.1f}x; "
      f"final loss gpu {g['final_loss']:.4f} cpu {c['final_loss']:.4f}")
PY
    log "$(cat "$OUT/bench.txt")"
}

# The broker's shared-memory arena registered as pinned memory (docs/shm.md): a real broker and
# producer on this host, the trainer on the GPU; its log must say shm-pinned and its summary
# delivery shm. Sets PINNED_OK or PINNED_FAIL for the summary line.
PINNED_OK="" PINNED_FAIL=""
run_gpu_pinned() { # build folder (full meson build)
    local b=$1 dir
    [ -x "$b/server/stoker-broker" ] && [ -x "$b/producer/stoker-producer" ] ||
        { log "no broker/producer built: pinned-arena check skipped"; return; }
    dir=$(mktemp -d) || return
    log "pinned-arena check: broker + producer + trainer --device gpu through shared memory"
    "$b/server/stoker-broker" --listen "ipc://$dir/b.ipc" --log-level warn > "$OUT/pinned-broker.log" 2>&1 &
    local broker=$!
    "$b/producer/stoker-producer" --broker "ipc://$dir/b.ipc" --delay 0:0 --max-examples 4096 \
        --log-level warn > "$OUT/pinned-producer.log" 2>&1 &
    local producer=$!
    timeout 120 "$b/trainer/stoker-trainer" --broker "ipc://$dir/b.ipc" --device gpu --rounds 2 \
        --round-length 1024 --batch-size 64 --progress off --log-level info \
        --json "$OUT/pinned.json" > "$OUT/pinned-trainer.log" 2>&1
    local rc=$?
    kill "$producer" "$broker" 2> /dev/null
    wait "$producer" "$broker" 2> /dev/null
    rm -rf "$dir"
    if [ $rc -eq 0 ] && grep -q "shm-pinned:" "$OUT/pinned-trainer.log" &&
        grep -q '"delivery": "shm"' "$OUT/pinned.json"; then
        PINNED_OK="arena pinned ($(grep -o '"delivery_batches": {[^}]*}' "$OUT/pinned.json"))"
    else
        PINNED_FAIL="pinned-arena check: trainer exit $rc, $(grep -m1 -o 'shm-[a-z]*:.*' \
            "$OUT/pinned-trainer.log" || echo 'no shm line') (see pinned-trainer.log)"
    fi
    log "${PINNED_OK:-$PINNED_FAIL}"
}

# ---- path 0: binaries built elsewhere (scripts/gpu-pack.sh), for a GPU machine without nng,
# protobuf-c or criterion: the same checks, run from the pack with its libraries ----
if [ -n "${STOKER_GPU_CHECK_PREBUILT:-}" ]; then
    PACK=$(cd "$STOKER_GPU_CHECK_PREBUILT" && pwd) || finish "FAIL: no pack at $STOKER_GPU_CHECK_PREBUILT" 1
    cuda_libs=$(dirname "$(find / -xdev -name 'libcublas.so.1[0-9]*' -print -quit 2> /dev/null)")
    export LD_LIBRARY_PATH="$PACK/lib:$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    log "prebuilt pack $PACK (cuBLAS from $cuda_libs)"
    ldd "$PACK/trainer/libstoker-cuda.so" > "$OUT/ldd.txt" 2>&1
    for t in test_trainer_backend test_trainer_mlp; do
        [ -x "$PACK/tests/trainer/$t" ] || continue
        timeout 300 "$PACK/tests/trainer/$t" > "$OUT/$t.log" 2>&1
        log "$t (CPU reference, criterion): exit $? ($(tail -1 "$OUT/$t.log"))"
    done
    run_gpu_bench "$PACK/trainer/stoker-trainer"
    run_gpu_pinned "$PACK"
    run_gpu_test "$PACK/tests/trainer/test_trainer_gpu" "$PACK/trainer/libstoker-cuda.so"
fi

# ---- path 1: the project's meson build ----
if [ "${STOKER_GPU_CHECK_DIRECT:-0}" != 1 ] && command -v meson > /dev/null; then
    log "meson setup $BUILD -Dcuda=enabled"
    if meson setup --wipe "$BUILD" -Dcuda=enabled > "$OUT/meson-setup.log" 2>&1 ||
        meson setup "$BUILD" -Dcuda=enabled > "$OUT/meson-setup.log" 2>&1; then
        targets=(tests/trainer/test_trainer_gpu)
        grep -q "criterion tests: YES" "$OUT/meson-setup.log" &&
            targets+=(tests/trainer/test_trainer_backend tests/trainer/test_trainer_mlp)
        targets+=(trainer/stoker-trainer trainer/libstoker-cuda.so)
        # The pinned-arena check needs the broker and a producer (meson setup found nng).
        targets+=(server/stoker-broker producer/stoker-producer)
        if ninja -C "$BUILD" "${targets[@]}" > "$OUT/build.log" 2>&1; then
            # The CPU reference tests too, when criterion was there to build them.
            meson test -C "$BUILD" --suite trainer --no-rebuild --print-errorlogs \
                > "$OUT/meson-test.log" 2>&1
            log "meson test --suite trainer: exit $? (see meson-test.log)"
            cp "$BUILD/meson-logs/testlog.txt" "$OUT/" 2>/dev/null
            run_gpu_bench "$BUILD/trainer/stoker-trainer"
            run_gpu_pinned "$BUILD"
            run_gpu_test "$BUILD/tests/trainer/test_trainer_gpu" "$BUILD/trainer/libstoker-cuda.so"
        fi
        log "meson build failed (see build.log); trying the direct build"
    else
        log "meson setup failed (see meson-setup.log: missing nng/protobuf-c?); trying the direct build"
    fi
fi

# ---- path 2: direct build of the trainer core and test_gpu.c ----
DIRECT="$BUILD-direct"
rm -rf "$DIRECT" && mkdir -p "$DIRECT" || finish "FAIL: cannot create $DIRECT" 1
cat > "$DIRECT/config.h" << EOF
#define STOKER_HAS_CUDA 1
#define STOKER_HAS_OPENBLAS 0
#define STOKER_VERSION "gpu-check"
#define STOKER_CUDA_PLUGIN_PATH "$DIRECT/libstoker-cuda.so"
EOF
CUDA_ROOT=$(dirname "$(dirname "$(command -v nvcc)")")
CUDA_LIB=""
for d in "$CUDA_ROOT/lib64" "$CUDA_ROOT/lib" "$CUDA_ROOT"/targets/*/lib; do
    [ -e "$d/libcudart.so" ] && CUDA_LIB=$d && break
done
[ -n "$CUDA_LIB" ] || finish "FAIL: libcudart.so not found under $CUDA_ROOT" 1
CFLAGS=(-std=c11 -D_GNU_SOURCE -O2 -g -fPIC -Wall -Wextra -Werror -Wundef -Wshadow -Wno-unused-parameter
    -I "$DIRECT" -I common/include -I trainer -isystem "$CUDA_ROOT/include")
# The plugin (backend_cuda.c, kernels.cu, error.c; only its descriptor exported, as meson builds
# it) and test_trainer_gpu without CUDA, which opens it through STOKER_CUDA_PLUGIN.
(
    set -x
    mkdir -p "$DIRECT/plugin" "$DIRECT/test" &&
        nvcc -O2 -Xcompiler -fPIC -gencode 'arch=compute_90,code=[sm_90,compute_90]' -I "$DIRECT" \
            -I common/include -c trainer/kernels.cu -o "$DIRECT/plugin/kernels.o" &&
        for f in trainer/backend_cuda.c common/base/error.c; do
            cc "${CFLAGS[@]}" -c "$f" -o "$DIRECT/plugin/$(basename "$f" .c).o" || exit 1
        done &&
        cc -shared -o "$DIRECT/libstoker-cuda.so" "$DIRECT"/plugin/*.o \
            -Wl,--version-script=trainer/plugin.map -Wl,--no-undefined \
            -L "$CUDA_LIB" -Wl,-rpath,"$CUDA_LIB" -lcublas -lcudart -lstdc++ -lm -lpthread &&
        for f in trainer/backend_cpu.c trainer/backend_plugin.c trainer/mlp.c trainer/safetensors.c \
            common/base/error.c tests/trainer/test_gpu.c; do
            cc "${CFLAGS[@]}" -c "$f" -o "$DIRECT/test/$(basename "$f" .c).o" || exit 1
        done &&
        cc -o "$DIRECT/test_trainer_gpu" "$DIRECT"/test/*.o -lm -ldl -lpthread
) > "$OUT/build-direct.log" 2>&1 || finish "FAIL: direct build failed (see build-direct.log)" 1
log "direct build done in $DIRECT"
run_gpu_test "$DIRECT/test_trainer_gpu" "$DIRECT/libstoker-cuda.so"
