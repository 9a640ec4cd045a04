#!/bin/sh
# meson install's last step for the systemd units: on the live system (no DESTDIR), as root,
# make the stoker user the units run as (systemd-sysusers with the installed sysusers.d file,
# which systemd reads from /usr/lib/sysusers.d only, not from a /usr/local prefix) and tell
# systemd about the new units (daemon-reload). A staged install (DESTDIR, a package build) leaves
# both to the package's own scripts; without root it says the two commands to run.
# usage: post_install.sh SYSUSERS_FILE
sysusers=$1
if [ -n "${DESTDIR:-}" ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "stoker: the units need the stoker user and a daemon-reload; as root run:" >&2
    echo "    systemd-sysusers $sysusers && systemctl daemon-reload" >&2
    exit 0
fi
if command -v systemd-sysusers > /dev/null 2>&1; then
    systemd-sysusers "$sysusers" && echo "stoker: the system user stoker exists (systemd-sysusers)"
elif ! getent passwd stoker > /dev/null; then
    useradd --system --user-group --home-dir /var/lib/stoker --no-create-home \
        --shell /usr/sbin/nologin --comment "stoker broker and producers" stoker &&
        echo "stoker: made the system user stoker (useradd)"
fi
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload && echo "stoker: systemctl daemon-reload done; start the broker: systemctl enable --now stoker-broker"
fi
exit 0
