#!/usr/bin/env bash
# Installs the Debian 12 packages stoker needs to build and test, only those missing.
# Sourced or run by scripts/run.sh and scripts/test.sh; safe to run again.
set -euo pipefail

# clang and libclang-rt-14-dev build the libFuzzer target whose replay is in the test suite
# (fuzz/meson.build) and which scripts/fuzz.sh fuzzes with. libwebp-dev and libtiff-dev let the
# images generator read WebP and TIFF; python3-pil and python3-torchvision are the references the augment operations are
# tested against (tests/producer/test_augment.py) and the side-by-side of bench.py's images_tv.
# python3-mesonpy, python3-build, python3-venv and patchelf build and install the wheel
# (tests/packaging/test_wheel.py); debhelper, dh-python and lintian the Debian packages, and
# systemd verifies their units (tests/packaging/test_debian.sh).
STOKER_PKGS=(meson ninja-build cmake pkg-config gcc libnng-dev libprotobuf-c-dev protobuf-c-compiler
    libcriterion-dev libopenblas-dev libpng-dev libjpeg62-turbo-dev iproute2 python3 procps
    python3-numpy python3-torch openssl clang libclang-rt-14-dev libwebp-dev libtiff-dev python3-pil
    python3-torchvision docker.io debootstrap curl
    python3-mesonpy python3-build python3-venv patchelf debhelper dh-python lintian systemd)
STOKER_PKGS_NORECOMMENDS=(docker-compose)

missing=()
for p in "${STOKER_PKGS[@]}" "${STOKER_PKGS_NORECOMMENDS[@]}" ${STOKER_EXTRA_PKGS:-}; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "deps: missing packages and not root; run: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
