#!/usr/bin/env bash
# scripts/build.sh as a user without root, on a machine that has the build's packages: it
# installs nothing, prints the one apt-get line for what is missing (here a package named by
# STOKER_EXTRA_PKGS that no machine has, standing for a missing optional one), still builds,
# and shows its progress while it builds. Needs root itself, to make the user (useradd); the
# user and the copy of the tree are removed at the end.
set -uo pipefail
src=${STOKER_SOURCE_ROOT:?}
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root to make a test user (useradd)"; exit 77; }
for tool in useradd userdel runuser git; do
    command -v "$tool" > /dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
user=stokerbuild$$
work=$(mktemp -d /tmp/stoker-build-user.XXXXXX)
cleanup() {
    userdel "$user" > /dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
useradd --no-create-home --home-dir "$work" --shell /bin/bash "$user" || { echo "FAIL: useradd"; exit 1; }
chmod 755 "$work"
# The working tree as a user would have it from a clone: tracked and new files, no build dirs.
(cd "$src" && git ls-files -z --cached --others --exclude-standard) |
    (cd "$src" && tar --null -T - -cf - 2> /dev/null) | tar -xf - -C "$work" || { echo "FAIL: copy"; exit 1; }
chown -R "$user" "$work"
fail=0
t0=$SECONDS
# A small build (no tests, fuzz target or CUDA): what is checked is the script, not the code.
timeout 900 runuser -u "$user" -- env HOME="$work" STOKER_EXTRA_PKGS=stoker-no-such-package \
    bash "$work/scripts/build.sh" -Dtests=disabled -Dfuzz=disabled -Dcuda=disabled \
    > "$work/out.log" 2> "$work/err.log"
rc=$?
echo "build.sh as $user: exit $rc in $((SECONDS - t0)) s; its stderr:"
sed 's/^/    /' "$work/err.log"
check() {
    local what=$1
    shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
check "build.sh exits 0 without root" [ "$rc" -eq 0 ]
check "the binaries are built" test -x "$work/build/server/stoker-broker" -a -x "$work/build/producer/stoker-producer"
check "one apt-get install line, naming the missing package" \
    [ "$(grep -c 'apt-get install.*stoker-no-such-package' "$work/err.log")" -eq 1 ]
check "nothing was installed (not root)" bash -c "! grep -q 'deps: installing' '$work/err.log'"
check "progress while building ([done/total] lines)" grep -q '^build: \[[0-9]*/[0-9]*\]' "$work/err.log"
check "ends with build: ok" grep -q "^build: ok" "$work/err.log"
check "the broker runs: --version" runuser -u "$user" -- "$work/build/server/stoker-broker" --version
[ "$fail" -eq 0 ] && echo "build as an unprivileged user: all passed"
exit "$fail"
