#!/usr/bin/env bash
# Builds stoker into ${STOKER_BUILD:-build}. Checks only the packages the build needs
# (scripts/deps.sh build): as root it installs the missing ones (Debian 12); as any other user
# it prints the apt-get line and builds with what is present when that suffices.
# Extra meson options can be passed as arguments, e.g. scripts/build.sh -Dcuda=disabled.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh build
build=${STOKER_BUILD:-build}
if [ ! -f "$build/build.ninja" ]; then
    echo "build: configuring $build (meson setup)" >&2
    meson setup "$build" "$@" > "${TMPDIR:-/tmp}/stoker-meson-setup.$$.log" 2>&1 || {
        cat "${TMPDIR:-/tmp}/stoker-meson-setup.$$.log" >&2
        rm -f "${TMPDIR:-/tmp}/stoker-meson-setup.$$.log"
        exit 1
    }
    rm -f "${TMPDIR:-/tmp}/stoker-meson-setup.$$.log"
elif [ $# -gt 0 ]; then
    meson configure "$build" "$@" >/dev/null
fi
# Debian's python3 looks for packages of a /usr/local install in
# /usr/local/lib/python3.X/dist-packages, but meson 1.0 installs the Python package into
# PREFIX/lib/python3/dist-packages (Debian's folder for /usr only), where `import stoker` fails.
# For the prefix /usr/local, name python3's own folder unless the user chose one.
if [ -x /usr/bin/python3 ]; then
    site=$(/usr/bin/python3 -c 'import sysconfig
if sysconfig.get_default_scheme() == "posix_local": print(sysconfig.get_path("purelib"))')
    chosen=$(meson introspect --buildoptions "$build" | /usr/bin/python3 -c 'import json, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
print(o.get("prefix"), o.get("python.purelibdir", "?") or "-")')
    if [ -n "$site" ] && [ "$chosen" = "/usr/local -" ]; then
        meson configure "$build" -Dpython.purelibdir="$site" >/dev/null
    fi
fi
# Progress on stderr: ninja's own [done/total] line, at most one every 10 s (the first build
# compiles a few hundred files, about 4 minutes on two cores), then any error in full.
log=$build/build-output.log
start=$SECONDS
last=-10
set +e
NINJA_STATUS="[%f/%t] " ninja -C "$build" > "$log" 2>&1 &
ninja_pid=$!
while kill -0 "$ninja_pid" 2>/dev/null; do
    if [ $((SECONDS - last)) -ge 10 ]; then
        step=$(grep -o '^\[[0-9]*/[0-9]*\]' "$log" | tail -n 1)
        [ -n "$step" ] && echo "build: ${step} targets, $((SECONDS - start)) s" >&2
        last=$SECONDS
    fi
    sleep 1
done
wait "$ninja_pid"
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
    grep -v '^\[[0-9]*/[0-9]*\] ' "$log" >&2 || true
    echo "build: failed (ninja exit $rc; the whole output: $log)" >&2
    exit "$rc"
fi
echo "build: ok ($build, $((SECONDS - start)) s)" >&2
