# Local stand-ins for NVIDIA's CUDA images, for building docker/Dockerfile's GPU trainer where no
# image registry is reachable: the parts of a CUDA toolkit the build and the trainer need,
# copied from the host's /usr/local/cuda by tests/containers/lib.sh (cuda_bases), on the local
# Debian 12 base. Not NVIDIA's images: no driver, no other CUDA library.
#   runtime: cudart, cuBLAS (+ cuBLASLt), the loader configured   -> CUDA_RUNTIME_IMAGE
#   devel:   runtime + nvcc (bin/, nvvm/), headers, static cudart  -> CUDA_DEVEL_IMAGE
# Context: a folder with runtime/ and devel/, each a partial copy of the toolkit's folder.
ARG BASE=stoker-base:bookworm
FROM ${BASE} AS runtime
ARG CUDA_DIR=cuda-13.0
COPY runtime/ /usr/local/${CUDA_DIR}/
RUN ln -s ${CUDA_DIR} /usr/local/cuda \
 && printf '%s\n' /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
      > /etc/ld.so.conf.d/cuda.conf \
 && ldconfig
ENV PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

FROM runtime AS devel
ARG CUDA_DIR=cuda-13.0
COPY devel/ /usr/local/${CUDA_DIR}/
RUN nvcc --version
