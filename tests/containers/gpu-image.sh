#!/usr/bin/env bash
# containers suite: the GPU trainer image. docker/Dockerfile's `trainer` target is built on local
# stand-ins for NVIDIA's CUDA images (stoker-cuda:devel and :runtime, made from the host's
# /usr/local/cuda: nvcc, headers, cudart, cuBLAS); skips when the host has no CUDA toolkit. Its
# trainer links no CUDA library and its CUDA plugin libstoker-cuda.so resolves cudart and cuBLAS
# inside the image, runs as uid 10001, the
# image has no compiler, and with no GPU in the container `--device auto` falls back to the CPU
# with a clear message while `--device gpu` fails with one.
. "$(dirname "$0")/lib.sh"
containers_begin gpu-image
why=$(cuda_toolkit) || skip "$why"
cuda_toolkit
cuda_bases
for t in cuda-build trainer; do
    build_target $t --build-arg DEBIAN_IMAGE="$CT_BASE" \
        --build-arg CUDA_DEVEL_IMAGE=stoker-cuda:devel --build-arg CUDA_RUNTIME_IMAGE=stoker-cuda:runtime
done
prune_leftovers
img=stoker-trainer:$STOKER_TAG

user=$(docker image inspect --format '{{.Config.User}}' "$img")
check "$img: USER is 10001:10001 ($user)" [ "$user" = 10001:10001 ]
docker run --rm "$img" sh -c 'ldd /usr/local/bin/stoker-trainer' > "$CT_TMP/ldd-trainer" 2>&1
check "stoker-trainer itself links no CUDA library (the backend is a plugin)" \
    eval '! grep -q "libcu" "$CT_TMP/ldd-trainer"'
docker run --rm "$img" sh -c 'ldd $(find /usr/local/lib -name libstoker-cuda.so)' > "$CT_TMP/ldd" 2>&1
check "the CUDA plugin libstoker-cuda.so is there: libcudart and libcublas resolve in /usr/local/cuda" \
    eval 'grep -q "libcudart.so.* => /usr/local/cuda" "$CT_TMP/ldd" && grep -q "libcublas.so.* => /usr/local/cuda" "$CT_TMP/ldd"'
check "no unresolved shared library" eval '! grep -q "not found" "$CT_TMP/ldd" "$CT_TMP/ldd-trainer"'
compilers=$(docker run --rm "$img" sh -c 'for c in gcc cc c++ g++ nvcc as ld meson ninja; do command -v $c; done; ls /usr/local/cuda/bin /usr/lib/gcc 2>/dev/null')
check "$img: no compiler, assembler, linker or nvcc in the image${compilers:+ (found: $(echo $compilers))}" [ -z "$compilers" ]

# No GPU is given to the container (and the CUDA bases carry no driver).
docker run --rm "$img" stoker-trainer --inline --delay 0:0 --rounds 2 --device auto > "$CT_TMP/auto.log" 2>&1
rc=$?
grep -E 'backend|completed' "$CT_TMP/auto.log"
check "--device auto without a GPU: exit 0 (got $rc)" [ "$rc" -eq 0 ]
check "--device auto says why it fell back (backend-fallback: ...)" grep -q 'INFO backend-fallback: .' "$CT_TMP/auto.log"
check "--device auto then trains on the cpu" grep -q 'INFO backend: cpu' "$CT_TMP/auto.log"
docker run --rm "$img" stoker-trainer --inline --delay 0:0 --rounds 2 --device gpu > "$CT_TMP/gpu.log" 2>&1
rc=$?
tail -n 1 "$CT_TMP/gpu.log"
check "--device gpu without a GPU: exit 1 with a message naming --device gpu (got $rc)" \
    eval '[ "$rc" -eq 1 ] && grep -q -- "--device gpu" "$CT_TMP/gpu.log"'
echo "size: $img $(image_size "$img")"
echo "size: stoker-cuda:runtime $(image_size stoker-cuda:runtime), stoker-cuda:devel $(image_size stoker-cuda:devel) (local CUDA bases)"
containers_end
