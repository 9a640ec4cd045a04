#!/usr/bin/env bash
# containers suite: the Debian packages on a clean system. Builds the packages from a
# copy of the source tree (dpkg-buildpackage -Pnocuda: the container has no CUDA, so stoker-cuda
# is left out), starts a fresh Debian 12 container from the project's debootstrap base with
# systemd as its init (tests/containers/systemd.Dockerfile, run --privileged), and in it:
#   - apt installs stoker, libstoker0 and python3-stoker (their dependencies from Debian's
#     mirror): the broker service runs as the user stoker, enabled;
#   - the operator edits /etc/stoker/producer.conf and starts two producer instances
#     (systemctl enable --now stoker-producer@aug-1 stoker-producer@aug-2);
#   - trains with the installed python3-stoker (tests/containers/clean_train.py: numpy SGD),
#     which SIGKILLs the broker mid-stream: systemd restarts it, the producers push their
#     retained examples again, and every example of both producers is trained exactly once;
#   - the journal has the broker's lines, of both starts;
#   - apt purge removes the packages: no file of theirs is left, the producer instances are
#     stopped and their enablement links gone. What is left is printed and checked against the
#     one thing Debian keeps on purge: the system user.
. "$(dirname "$0")/lib.sh"
containers_begin debian-install

# The tools to build the packages, as scripts/deps.sh installs them (root: containers_begin
# skipped otherwise when no engine answers).
missing=()
for t in dpkg-buildpackage:dpkg-dev dh:debhelper dh_python3:dh-python; do
    command -v "${t%%:*}" > /dev/null || missing+=("${t#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || die "missing ${missing[*]} and not root to apt-get install them"
    note "installing ${missing[*]}"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" > "$CT_TMP/apt.log" 2>&1 ||
        { tail -n 20 "$CT_TMP/apt.log"; die "apt-get install ${missing[*]} failed"; }
fi

# The packages, from a copy without build outputs (as tests/packaging/test_debian.sh).
src=$CT_TMP/src/stoker
mkdir -p "$src"
tar -C "$CT_ROOT" --exclude='./build*' --exclude=./.git --exclude='./obj-*' --exclude=./dist \
    --exclude='./.mesonpy*' --exclude=./debian/tmp --exclude='./debian/.debhelper' -cf - . |
    tar -C "$src" -xf -
t0=$SECONDS
(cd "$src" && nice -n 10 dpkg-buildpackage -b -us -uc -Pnocuda) > "$CT_TMP/deb.log" 2>&1 ||
    { tail -n 30 "$CT_TMP/deb.log"; die "dpkg-buildpackage -b -us -uc -Pnocuda failed (log above)"; }
note "built the packages in $((SECONDS - t0)) s: $(cd "$CT_TMP/src" && ls *.deb | grep -v dbgsym | tr '\n' ' ')"

# The clean machine: the base plus systemd, nothing of stoker.
base_image
img=stoker-systemd:bookworm
if ! docker image inspect "$img" > /dev/null 2>&1; then
    mkdir -p "$CT_TMP/sd" && cp "$CT_ROOT/tests/containers/systemd.Dockerfile" "$CT_TMP/sd/Dockerfile"
    nice -n 10 docker build --build-arg BASE="$CT_BASE" -t "$img" "$CT_TMP/sd" > "$CT_TMP/sd.log" 2>&1 ||
        { tail -n 20 "$CT_TMP/sd.log"; die "building $img failed (log above)"; }
    note "built $img: $(image_size "$img")"
fi
name=stoker-clean-$$
# systemd as PID 1 needs to mount its cgroup hierarchy and the units' sandboxing namespaces
# (ProtectSystem=, PrivateTmp=, ...): --privileged gives it that, with /run and /tmp as tmpfs as
# on a booted machine. Where the engine's own host lacks a capability (this VM's bounding set
# has no CAP_SYS_RESOURCE), --privileged cannot start ("unable to apply caps: operation not
# permitted"): then every capability the host has, without seccomp and AppArmor confinement and
# with a private cgroup namespace, which is what systemd needs of --privileged.
tmpfs=(--tmpfs /run --tmpfs /run/lock --tmpfs /tmp)
if ! docker run -d --name "$name" --privileged "${tmpfs[@]}" "$img" > "$CT_TMP/run.log" 2>&1; then
    docker rm -f "$name" > /dev/null 2>&1
    caps=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP
        LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER
        SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE
        SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP
        MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF
        CHECKPOINT_RESTORE)
    bnd=$((16#$(awk '/^CapBnd:/ { print $2 }' /proc/self/status)))
    drop=()
    for i in "${!caps[@]}"; do (( (bnd >> i) & 1 )) || drop+=(--cap-drop "${caps[$i]}"); done
    note "--privileged failed ($(grep -o 'unable to [^:]*: [^:]*' "$CT_TMP/run.log" | head -n 1)); the host lacks ${drop[*]:-nothing}: running with --cap-add ALL ${drop[*]} --security-opt seccomp=unconfined --security-opt apparmor=unconfined --cgroupns private"
    docker run -d --name "$name" --cap-add ALL "${drop[@]}" --security-opt seccomp=unconfined \
        --security-opt apparmor=unconfined --cgroupns private "${tmpfs[@]}" "$img" > "$CT_TMP/run.log" 2>&1 ||
        { cat "$CT_TMP/run.log"; die "docker run of $img failed (above)"; }
fi
on_exit "docker rm -f $name"
cin() { docker exec "$name" "$@"; }
state() { cin systemctl is-system-running 2> /dev/null; }
booted() { case $(state) in running | degraded) return 0 ;; *) return 1 ;; esac; }
if ! wait_until 60 booted; then
    docker logs "$name" 2>&1 | tail -n 20
    die "systemd in the container did not finish booting within 60 s (state: $(state))"
fi
check "systemd is the container's init (PID 1: $(cin cat /proc/1/comm), state $(state))" \
    [ "$(cin cat /proc/1/comm)" = systemd ]
[ "$(state)" = running ] || cin systemctl --failed --no-legend

# Every file of the clean machine, to compare with what purge leaves.
snapshot() {
    cin bash -c 'find / -xdev \( -path /proc -o -path /sys -o -path /root -o -path /dev \) -prune -o -print | sort'
}
snapshot > "$CT_TMP/files-before" 2> /dev/null
# Install, as a user would: apt install ./*.deb.
docker exec "$name" mkdir -p /root/debs /root/test
for d in "$CT_TMP"/src/stoker_*.deb "$CT_TMP"/src/libstoker0_*.deb "$CT_TMP"/src/python3-stoker_*.deb; do
    docker cp "$d" "$name:/root/debs/" > /dev/null
done
docker cp "$CT_ROOT/tests/containers/clean_train.py" "$name:/root/test/" > /dev/null
t0=$SECONDS
if ! cin bash -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        /root/debs/stoker_*.deb /root/debs/libstoker0_*.deb /root/debs/python3-stoker_*.deb python3-numpy' \
        > "$CT_TMP/install.log" 2>&1; then
    tail -n 30 "$CT_TMP/install.log"
    die "apt install of the packages failed (log above)"
fi
pass "apt install ./stoker_*.deb ./libstoker0_*.deb ./python3-stoker_*.deb python3-numpy ($((SECONDS - t0)) s)"
# numpy is only this test's (python3-stoker recommends it): autoremove may take it at the end.
cin apt-mark auto python3-numpy > /dev/null
cin dpkg-query -W -f '${Package} ${Version}\n' stoker libstoker0 python3-stoker
active() { [ "$(cin systemctl is-active "$1" 2> /dev/null)" = active ]; }
check "stoker-broker.service is enabled and active after the install" \
    eval '[ "$(cin systemctl is-enabled stoker-broker.service)" = enabled ] && wait_until 10 active stoker-broker.service'
check "the broker runs as the system user stoker ($(cin ps -o user= -C stoker-broker | tr '\n' ' '))" \
    [ "$(cin ps -o user= -C stoker-broker)" = stoker ]
check "stoker-trainer of the package runs without CUDA: --version" cin stoker-trainer --version
# Safe by default: the installed broker answers on the container's loopback only; from the
# host (another network namespace) its port 7070 is closed.
ct_ip=$(docker inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$name")
check "the packaged broker accepts on 127.0.0.1:7070 inside the container" \
    cin timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/7070'
check "the packaged broker is not reachable from the host at ${ct_ip:-?}:7070" \
    eval '[ -n "$ct_ip" ] && ! timeout 5 bash -c "exec 3<>/dev/tcp/$ct_ip/7070" 2> /dev/null'

# The operator's change: producers that make cheap examples and stop after 3000 each.
cin sed -i 's#^STOKER_PRODUCER_FLAGS=.*#STOKER_PRODUCER_FLAGS="--broker ipc:///run/stoker/broker.ipc --delay 0.001:0.003 --max-examples 3000"#' \
    /etc/stoker/producer.conf
cin grep ^STOKER_PRODUCER_FLAGS /etc/stoker/producer.conf
old_pid=$(cin systemctl show -p MainPID --value stoker-broker.service)
cin systemctl enable --now stoker-producer@aug-1.service stoker-producer@aug-2.service > /dev/null 2>&1
check "stoker-producer@aug-1 and @aug-2 are active" \
    eval 'wait_until 10 active stoker-producer@aug-1.service && wait_until 10 active stoker-producer@aug-2.service'

# Train with the packaged Python package; it SIGKILLs the broker after 1500 examples.
t0=$SECONDS
cin timeout 300 python3 /root/test/clean_train.py ipc:///run/stoker/broker.ipc 1500 /root/test/report.json \
    > "$CT_TMP/train.log" 2>&1
rc=$?
docker cp "$name:/root/test/report.json" "$CT_TMP/report.json" > /dev/null 2>&1
sed 's/^/  train: /' "$CT_TMP/train.log" | head -n 40
note "training took $((SECONDS - t0)) s"
check "the training script ran to the end (exit $rc)" [ "$rc" -eq 0 ]
if [ -f "$CT_TMP/report.json" ]; then
    check "python3-stoker came from the package (/usr/lib/python3/dist-packages)" \
        json_check "$CT_TMP/report.json" 'j["stoker_file"].startswith("/usr/lib/python3/dist-packages/stoker/")'
    check "training ended with the end of the supply" json_check "$CT_TMP/report.json" 'str(j["ended"]).startswith("supply ended")'
    check "the broker was SIGKILLed mid-stream (pid $old_pid) and systemd's new one served the rest" \
        json_check "$CT_TMP/report.json" "j['killed_pid'] == $old_pid and j['broker_pid_after'] not in (0, $old_pid)"
    check "nothing lost: two producers' 3000 examples each, every seq once (seqs 0..2999 or 1..3000)" \
        json_check "$CT_TMP/report.json" 'len(j["per_session"]) == 2 and all(s["count"] == 3000 and s["distinct"] == 3000 and s["max"] - s["min"] == 2999 for s in j["per_session"].values())'
    check "the model learned (mean loss of the last 20 steps below the first 20's)" \
        json_check "$CT_TMP/report.json" 'j["loss_last"] < j["loss_first"]'
else
    fail "no report from the training script"
fi
restarts=$(cin systemctl show -p NRestarts --value stoker-broker.service)
check "systemd restarted the broker once (NRestarts=$restarts) and it is active" \
    eval '[ "$restarts" = 1 ] && active stoker-broker.service'
cin journalctl -u stoker-broker.service --no-pager -o short > "$CT_TMP/journal-broker" 2>&1
cin journalctl -u 'stoker-producer@*' --no-pager -o cat > "$CT_TMP/journal-producers" 2>&1
grep -E 'listening|Main process exited|Scheduled restart' "$CT_TMP/journal-broker" | sed 's/^/  journal: /' | head -n 12
check "the journal has the broker's lines, of both starts (listening ipc:///run/stoker/broker.ipc twice)" \
    [ "$(grep -c 'stoker-broker\[[0-9]*\]: listening ipc:///run/stoker/broker.ipc' "$CT_TMP/journal-broker")" -ge 2 ]
check "the journal says systemd restarted it after the SIGKILL" \
    grep -q 'Main process exited, code=killed, status=9/KILL' "$CT_TMP/journal-broker"
grep -E 'pushed [0-9]+ retained examples again|answers again' "$CT_TMP/journal-producers" | sed 's/^/  journal: /' | head -n 6
check "the producers pushed their retained examples again to the new broker (journal)" \
    grep -q 'retained examples again' "$CT_TMP/journal-producers"

# Remove and purge: nothing of the packages may stay.
cin bash -c 'DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq stoker python3-stoker libstoker0' > "$CT_TMP/remove.log" 2>&1 ||
    { tail -n 20 "$CT_TMP/remove.log"; fail "apt-get remove failed"; }
check "apt remove keeps the configuration the user changed (/etc/stoker/producer.conf)" \
    cin grep -q -- '--max-examples 3000' /etc/stoker/producer.conf
check "apt remove stopped the broker and the producer instances" \
    eval '! cin pgrep -f "stoker-(broker|producer)"'
# libstoker0 has no conffiles, so remove already took all of it: purge what dpkg still knows.
rc_pkgs=$(cin dpkg-query -W -f '${Package} ${db:Status-Abbrev}\n' stoker python3-stoker libstoker0 2> /dev/null |
    awk '$2 ~ /^rc/ { print $1 }' | tr '\n' ' ')
echo "after remove, with configuration left: ${rc_pkgs:-none}"
cin bash -c "DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $rc_pkgs" > "$CT_TMP/purge.log" 2>&1 ||
    { tail -n 20 "$CT_TMP/purge.log"; fail "apt-get purge $rc_pkgs failed"; }
known=$(cin dpkg-query -W -f '${Package} ${db:Status-Abbrev}\n' stoker python3-stoker libstoker0 2> /dev/null | awk '$2 !~ /^un/')
check "apt purge: dpkg knows none of the packages any more${known:+ (still: $known)}" [ -z "$known" ]
# The dependencies apt installed for them go too, so that the machine is what it was before.
cin bash -c 'DEBIAN_FRONTEND=noninteractive apt-get autoremove --purge -y -qq' > "$CT_TMP/autoremove.log" 2>&1
snapshot > "$CT_TMP/files-after" 2> /dev/null
# New files since before the install, but apt's and dpkg's own records, logs and the journal.
new_files=$(comm -13 "$CT_TMP/files-before" "$CT_TMP/files-after" |
    grep -Ev '^/(var/lib/apt|var/cache/(apt|debconf)|var/lib/dpkg|var/log|run|tmp|var/tmp)(/|$)')
echo "new files after purge and autoremove --purge, but apt's, dpkg's and logs: ${new_files:-none}"
check "apt purge + autoremove --purge leave nothing new under /usr, /etc, /opt, /srv, /var/lib but the user's records" \
    eval '! echo "$new_files" | grep -Ev "^/etc/(passwd|group|shadow|gshadow|subuid|subgid)-?$" | grep -E "^/(usr|etc|opt|srv|var/lib)/"'
# What the install and use left that purge did not take away: files named stoker anywhere.
left=$(cin bash -c 'find / -xdev \( -path /proc -o -path /sys -o -path /root \) -prune -o -iname "*stoker*" -print' 2>/dev/null | sort)
echo "left after purge (paths named *stoker*): ${left:-none}"
check "apt purge leaves no file named stoker (units, wants links, /etc/stoker, /var/lib/stoker, libraries, python)" \
    [ -z "$left" ]
check "the system user stoker stays (Debian keeps system users on purge)" cin id stoker
containers_end
