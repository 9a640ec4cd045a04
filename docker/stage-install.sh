#!/bin/sh
# Used inside docker/Dockerfile's build stages only.
#
#   stage-install.sh BUILD_DIR STAGE_DIR BINARY...
#       `meson install --destdir STAGE_DIR`, then make sure every named BINARY ends up in
#       STAGE_DIR/usr/local/bin (copied from the build tree when the meson target is not
#       installable) together with any shared libstoker, and check with ldd that each binary's
#       shared libraries all resolve.
#
#   stage-install.sh --runtime-debs STAGE_DIR OUT_FILE BINARY...
#       Write to OUT_FILE the Debian/Ubuntu packages that own the shared libraries the named
#       binaries load (CUDA and libc packages left out: the runtime base image has them), so a
#       runtime stage on another distribution release can install exactly those.
set -eu

stage_libpath() {
    printf '%s:%s%s' "$1/usr/local/lib" "$1/usr/local/lib/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)" \
        "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

if [ "${1:-}" = "--runtime-debs" ]; then
    stage=$2 out=$3
    shift 3
    libpath=$(stage_libpath "$stage")
    : > "$out.tmp"
    for b in "$@"; do
        LD_LIBRARY_PATH=$libpath ldd "$stage/usr/local/bin/$b" | awk '$3 ~ /^\// { print $3 }' |
        while read -r lib; do
            real=$(readlink -f "$lib")
            for p in "$real" "${real#/usr}" "$lib"; do
                if owner=$(dpkg -S "$p" 2>/dev/null); then
                    printf '%s\n' "$owner" | head -n 1 | cut -d: -f1 >> "$out.tmp"
                    break
                fi
            done
        done
    done
    sort -u "$out.tmp" | grep -Ev '^(libc6|libgcc-s1|libstdc\+\+6|cuda-.*|libcublas.*|libnvjitlink.*)$' > "$out" || true
    rm -f "$out.tmp"
    echo "stage-install: runtime packages:"; sed 's/^/  /' "$out"
    exit 0
fi

build=$1 stage=$2
shift 2

meson install -C "$build" --destdir "$stage" --strip
mkdir -p "$stage/usr/local/bin" "$stage/usr/local/lib"

# A shared libstoker (the Python package uses one) must travel with the binaries.
# (libstoker.so itself: the CUDA plugin libstoker-cuda.so is not it.)
if ! find "$stage/usr/local" -name 'libstoker.so*' | grep -q .; then
    find "$build" \( -name 'libstoker.so' -o -name 'libstoker.so.[0-9]*' \) \( -type f -o -type l \) \
        -exec cp -P {} "$stage/usr/local/lib/" \;
fi

libpath=$(stage_libpath "$stage")
for b in "$@"; do
    if [ ! -x "$stage/usr/local/bin/$b" ]; then
        src=$(find "$build" -type f -name "$b" -perm -u+x | head -n 1)
        if [ -z "$src" ]; then
            echo "stage-install: $b was not built under $build" >&2
            exit 1
        fi
        install -m 0755 "$src" "$stage/usr/local/bin/$b"
        strip --strip-unneeded "$stage/usr/local/bin/$b" || true
    fi
    if LD_LIBRARY_PATH=$libpath ldd "$stage/usr/local/bin/$b" | grep 'not found'; then
        echo "stage-install: $b has unresolved shared libraries (above)" >&2
        exit 1
    fi
    echo "stage-install: $b ok"
done
