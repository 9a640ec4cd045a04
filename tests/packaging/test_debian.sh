#!/usr/bin/env bash
# The Debian packages (issue 30): dpkg-buildpackage -b -us -uc on a copy of the source tree makes
# stoker, libstoker0, libstoker-dev, python3-stoker and, where the CUDA toolkit is installed,
# stoker-cuda (the trainer's CUDA plugin; elsewhere built with -Pnocuda, said so); lintian
# reports no error; only stoker-cuda depends on or links CUDA; each carries
# meson.build's version and what it should; the units pass systemd-analyze verify as packaged;
# and, unpacked into a temporary root (dpkg-deb -x: this machine's system is not touched), the
# packaged headers and library compile and run producer/examples (tests/install) and the packaged
# Python package imports with the packaged library and trains against the packaged broker.
# Prints each package's size and files. Skips (77) where the packaging tools are missing.
set -uo pipefail
src=${STOKER_SOURCE_ROOT:?}
version=${STOKER_VERSION:?}
for tool in dpkg-buildpackage dh dh_python3 help2man lintian systemd-analyze; do
    command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed (scripts/deps.sh test installs debhelper, dh-python, help2man, lintian, systemd)"; exit 77; }
done
work=$(mktemp -d /tmp/stoker-deb.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail=0
pass=0
check() { # check WHAT COMMAND...: runs it, says ok or FAIL
    local what=$1; shift
    if "$@" >"$work/out" 2>&1; then echo "ok   $what"; pass=$((pass + 1)); else echo "FAIL $what"; tail -n 30 "$work/out"; fail=$((fail + 1)); fi
}

# A copy without build outputs, as a fresh checkout would be.
mkdir -p "$work/stoker"
tar -C "$src" --exclude='./build*' --exclude=./.git --exclude='./obj-*' --exclude=./dist \
    --exclude='./.mesonpy*' --exclude=./debian/tmp --exclude='./debian/.debhelper' -cf - . |
    tar -C "$work/stoker" -xf -
# stoker-cuda needs nvcc (NVIDIA's toolkit is no Debian package: debian/rules).
profile=() expected="libstoker-dev libstoker0 python3-stoker stoker "
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
    expected="libstoker-dev libstoker0 python3-stoker stoker stoker-cuda "
else
    profile=(-Pnocuda)
    echo "no CUDA toolkit (nvcc): building with -Pnocuda, without stoker-cuda"
fi
t0=$(date +%s)
check "dpkg-buildpackage -b -us -uc ${profile[*]}" bash -c "cd '$work/stoker' && dpkg-buildpackage -b -us -uc ${profile[*]}"
echo "built in $(( $(date +%s) - t0 )) s"
debs=()
for d in "$work"/*.deb; do case "$d" in *-dbgsym_*) ;; *) debs+=("$d") ;; esac; done
[ ${#debs[@]} -gt 0 ] && [ -e "${debs[0]}" ] || { echo "FAIL no .deb was built"; echo "0 passed, 1 failed"; exit 1; }

names=$(for d in "${debs[@]}"; do dpkg-deb -f "$d" Package; done | sort | tr '\n' ' ')
check "the packages ($names)" test "$names" = "$expected"
for d in "${debs[@]}"; do
    check "$(basename "$d") has version $version" test "$(dpkg-deb -f "$d" Version)" = "$version"
done
check "lintian reports no errors" bash -c "lintian --fail-on error '$work'/*.changes"
sed 's/^/  lintian: /' "$work/out" | grep -v 'root privileges' | head -n 30
cp "$work/out" "$work/lintian.out"
check "lintian finds no binary without a man page" bash -c "! grep -q 'no-manual-page' '$work/lintian.out'"

# What each holds.
for d in "${debs[@]}"; do
    echo "$(basename "$d"): $(stat -c %s "$d") bytes, installed size $(dpkg-deb -f "$d" Installed-Size) KiB"
    dpkg-deb -c "$d" | awk '$1 !~ /^d/ {print "  " $3 "  " $6 $7 $8}'
done
deb() { ls "$work/$1"_*.deb; }
check "stoker has the binaries, units and config" bash -c "dpkg-deb -c $(deb stoker) | grep -q ' ./usr/bin/stoker-broker$' && dpkg-deb -c $(deb stoker) | grep -q 'lib/systemd/system/stoker-producer@.service' && dpkg-deb -c $(deb stoker) | grep -q ' ./etc/stoker/broker.conf$'"
for b in stoker-broker stoker-producer stoker-pull stoker-scale stoker-trainer; do
    check "stoker has the man page $b.1, made from its --help" bash -c "dpkg-deb --fsys-tarfile $(deb stoker) | tar -xOf - ./usr/share/man/man1/$b.1.gz | zcat | grep -q -- '--version'"
done
check "the packaged broker listens on loopback and ipc only" bash -c "dpkg-deb --fsys-tarfile $(deb stoker) | tar -xOf - ./etc/stoker/broker.conf | grep '^STOKER_BROKER_FLAGS=' | grep -q -- '--listen tcp://127.0.0.1:7070 --listen ipc://'"
check "stoker's config files are conffiles" bash -c "dpkg-deb -I $(deb stoker) conffiles | grep -q /etc/stoker/producer.conf"
check "libstoker0 has only the library" bash -c "! dpkg-deb -c $(deb libstoker0) | grep -E '\.h$|\.pc$|bin/'"
check "libstoker-dev has the headers and stoker.pc" bash -c "dpkg-deb -c $(deb libstoker-dev) | grep -q 'usr/include/stoker/labels.h' && dpkg-deb -c $(deb libstoker-dev) | grep -q 'pkgconfig/stoker.pc'"
for p in stoker libstoker0 libstoker-dev python3-stoker; do
    check "$p needs no CUDA" bash -c "! dpkg-deb -f $(deb $p) Depends | grep -i -E 'cuda|cublas'"
done
if [[ $expected == *stoker-cuda* ]]; then
    echo "stoker-cuda Depends: $(dpkg-deb -f "$(deb stoker-cuda)" Depends)"
    check "stoker-cuda holds only the plugin, in LIBDIR/stoker" bash -c "dpkg-deb -c $(deb stoker-cuda) | awk '\$1 !~ /^d/ {print \$6}' | grep -v '^./usr/share/doc/' | tr '\n' ' ' | grep -qx './usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/stoker/libstoker-cuda.so '"
    check "stoker-cuda depends on the CUDA runtime, cuBLAS and the same stoker" bash -c "d=\$(dpkg-deb -f $(deb stoker-cuda) Depends) && echo \"\$d\" | grep -q 'cuda-cudart-' && echo \"\$d\" | grep -q 'libcublas' && echo \"\$d\" | grep -q 'stoker (= $version)'"
fi

# Unpacked, as installed.
root=$work/root
for d in "${debs[@]}"; do dpkg-deb -x "$d" "$root"; done
units=$work/units
mkdir -p "$units"
for u in stoker-broker.service stoker-producer@.service; do
    sed "s#/usr/bin/#$root/usr/bin/#" "$root/lib/systemd/system/$u" >"$units/$u"
done
check "systemd-analyze verify of the packaged units" bash -c "out=\$(systemd-analyze verify '$units/stoker-broker.service' '$units/stoker-producer@.service' 2>&1); echo \"\$out\"; ! echo \"\$out\" | grep -q stoker"
check "the packaged headers and library build and run producer/examples" \
    env STOKER_INSTALLED_ROOT="$root" STOKER_PREFIX=/usr STOKER_LIBDIR="lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)" \
    STOKER_INCLUDEDIR=include STOKER_BINDIR=bin STOKER_SOURCE_ROOT="$src" STOKER_VERSION="$version" \
    /usr/bin/python3 "$src/tests/install/test_installed.py"
for b in stoker-broker stoker-producer stoker-pull stoker-trainer; do
    check "packaged $b --version is $version" bash -c "'$root/usr/bin/$b' --version | grep -qw '$version'"
done
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
check "the packaged stoker-trainer links no CUDA library" bash -c "! readelf -d '$root/usr/bin/stoker-trainer' | grep NEEDED | grep -i -E 'cuda|cublas'"
check "the packaged stoker-trainer looks for the plugin at /usr/lib/$multiarch/stoker/libstoker-cuda.so" \
    grep -q "/usr/lib/$multiarch/stoker/libstoker-cuda.so" "$root/usr/bin/stoker-trainer"
trainer_run=(--inline --delay 0:0 --rounds 1 --round-length 64 --batch-size 64 --hidden 8 --progress off)
if [[ $expected == *stoker-cuda* ]] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
    check "packaged trainer + packaged plugin, no GPU: --device gpu exits 1 with 'no usable GPU'" bash -c "
        out=\$(STOKER_CUDA_PLUGIN='$root/usr/lib/$multiarch/stoker/libstoker-cuda.so' '$root/usr/bin/stoker-trainer' ${trainer_run[*]} --device gpu 2>&1); rc=\$?
        echo \"\$out\"; [ \$rc -eq 1 ] && echo \"\$out\" | grep -q -- '--device gpu: no usable GPU'"
fi
if [ ! -e "/usr/lib/$multiarch/stoker/libstoker-cuda.so" ]; then
    check "packaged trainer without stoker-cuda: --device auto trains on the CPU saying there is no plugin" bash -c "
        out=\$(env -u STOKER_CUDA_PLUGIN '$root/usr/bin/stoker-trainer' ${trainer_run[*]} --device auto 2>&1) &&
        echo \"\$out\" | grep -q 'backend-fallback: no CUDA backend plugin: libstoker-cuda.so is neither beside this program ($root/usr/bin/libstoker-cuda.so) nor at /usr/lib/$multiarch/stoker/libstoker-cuda.so'"
fi
site=$(ls -d "$root"/usr/lib/python3/dist-packages)
check "python3-stoker imports with libstoker0's library and says the version" bash -c "
    cd '$work' && out=\$(env -u STOKER_LIB LD_LIBRARY_PATH='$root/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)' \
        PYTHONPATH='$site' /usr/bin/python3 -c 'import stoker, stoker._lib as L; print(stoker.__version__, stoker.__file__, L.load()._name)') &&
    echo \"\$out\" && set -- \$out && [ \"\$1\" = '$version' ] && [ \"\${2#$site}\" != \"\$2\" ] && [ \"\$3\" = libstoker.so.0 ]"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
