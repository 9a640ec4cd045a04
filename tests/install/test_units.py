"""The systemd units and their config files, as configured in this build:
`systemd-analyze verify` passes on each (with ExecStart pointed at this build's binaries, since
the installed paths do not exist here), each runs as the stoker user under the sandboxing
docs/operating.md lists and restarts on failure, and each config file names every flag of its
binary (its own --cli-table) with the default --help shows. The packaged broker's config is safe
by default: loopback and ipc only, so nothing is reachable from another host until the operator
names an address."""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from helpers import SKIP, run  # noqa: E402

UNITS = os.environ["STOKER_UNITS_DIR"]  # the build's systemd/
BINDIR = os.environ["STOKER_INSTALLED_BINDIR"]
BINARIES = {"stoker-broker": os.environ["STOKER_BROKER_BIN"],
            "stoker-producer": os.environ["STOKER_PRODUCER_BIN"]}
SANDBOX = ["User=stoker", "NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes",
           "PrivateDevices=yes", "ProtectKernelTunables=yes", "RestrictAddressFamilies=",
           "SystemCallFilter=@system-service", "CapabilityBoundingSet=", "Restart=on-failure",
           "RestartPreventExitStatus=2"]


def unit_text(name):
    with open(os.path.join(UNITS, name)) as f:
        return f.read()


def test_units_pass_systemd_analyze_verify():
    if shutil.which("systemd-analyze") is None:
        print("SKIP: systemd-analyze is not installed (package systemd)")
        sys.exit(SKIP)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("stoker-broker.service", "stoker-producer@.service"):
            text = unit_text(name)
            for prog, path in BINARIES.items():
                text = text.replace(os.path.join(BINDIR, prog), path)
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
        units = [os.path.join(tmp, "stoker-broker.service"),
                 os.path.join(tmp, "stoker-producer@.service")]
        out = subprocess.run(["systemd-analyze", "verify"] + units, capture_output=True,
                             text=True, timeout=60)
        ours = [line for line in (out.stdout + out.stderr).splitlines() if "stoker" in line]
        assert out.returncode == 0 and not ours, (out.returncode, out.stdout, out.stderr)


def test_units_are_sandboxed_and_restart():
    for name in ("stoker-broker.service", "stoker-producer@.service"):
        text = unit_text(name)
        for want in SANDBOX:
            assert re.search("^" + re.escape(want), text, re.M), (name, want)
    broker = unit_text("stoker-broker.service")
    assert "RuntimeDirectory=stoker" in broker
    producer = unit_text("stoker-producer@.service")
    assert "--name %i" in producer and "producer-%i.conf" in producer


def test_config_files_name_every_flag_and_default():
    for prog, conf in (("stoker-broker", "broker.conf"), ("stoker-producer", "producer.conf")):
        with open(os.path.join(UNITS, conf)) as f:
            text = f.read()
        rows = subprocess.run([BINARIES[prog], "--cli-table"], capture_output=True, text=True,
                              check=True).stdout.splitlines()
        flags = [r.split("\t")[0] for r in rows]
        assert flags, prog
        comments = "\n".join(l for l in text.splitlines() if l.startswith("#"))
        missing = [f for f in flags if "--" + f + " " not in comments]
        assert not missing, (conf, missing)
        assert "(default" in comments, conf
        # The one setting line, in a form systemd's EnvironmentFile reads.
        settings = [l for l in text.splitlines() if l and not l.startswith("#")]
        var = "STOKER_%s_FLAGS" % prog.split("-")[1].upper()
        assert len(settings) == 1 and settings[0].startswith(var + '="'), settings


def broker_flags():
    with open(os.path.join(UNITS, "broker.conf")) as f:
        line = [l for l in f.read().splitlines() if l.startswith("STOKER_BROKER_FLAGS=")][0]
    # systemd splits the value at spaces (no shell), so the test does the same.
    return line.split("=", 1)[1].strip().strip("\"").split()


def is_loopback_or_local(url):
    if url.startswith("ipc://"):
        return True
    m = re.match(r"^(?:tcp|tls\+tcp|http)://(\[[^]]*\]|[^:/]*)", url)
    return bool(m) and m.group(1) in ("127.0.0.1", "localhost", "[::1]")


def host_address():
    """An address of this host that is not loopback, or None (no route anywhere)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # a documentation address: nothing is sent
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


def test_packaged_broker_listens_on_loopback_and_ipc_only():
    # What apt install starts must not be open to the network before anyone chose so: every
    # listener of the shipped config is loopback or ipc, unless it also requires a token.
    flags = broker_flags()
    urls = [flags[i + 1] for i, f in enumerate(flags) if f in ("--listen", "--metrics")]
    assert any(u.startswith("ipc://") for u in urls), urls
    if "--token-file" not in flags:
        wide = [u for u in urls if not is_loopback_or_local(u)]
        assert not wide, "the packaged broker listens on %s without a token" % wide
    else:
        return
    # And as run: the broker with exactly those flags (a free port, a temporary ipc path)
    # accepts on loopback and refuses a connection to this host's network address.
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))  # a free port on every address, given back to the broker
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        args = []
        for f in flags:
            f = re.sub(r"^tcp://([^/]*):\d+$", r"tcp://\1:%d" % port, f)
            f = re.sub(r"^http://([^/]*):\d+$", r"http://\1:0", f)
            args.append(re.sub(r"^ipc://.*$", "ipc://" + os.path.join(tmp, "broker.ipc"), f))
        broker = subprocess.Popen([BINARIES["stoker-broker"]] + args, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=2).close()
                    break
                except OSError:
                    assert broker.poll() is None, "the broker exited %d" % broker.returncode
                    assert time.monotonic() < deadline, "the broker is not listening on loopback"
                    time.sleep(0.05)
            addr = host_address()
            if addr is not None:
                try:
                    socket.create_connection((addr, port), timeout=2).close()
                    reached = True
                except OSError:
                    reached = False
                assert not reached, "the packaged broker is reachable at %s:%d" % (addr, port)
        finally:
            broker.terminate()
            broker.wait(10)


def test_install_step_makes_the_service_user():
    # meson install's post-install script, as root on the live system, makes the user the units
    # run as (here a user of the test's own, from a sysusers.d file like the installed one); with
    # DESTDIR (a staged or package install) it leaves the system alone.
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "systemd",
                          "post_install.sh")
    if os.getuid() != 0 or shutil.which("systemd-sysusers") is None:
        print("skipped: needs root and systemd-sysusers")
        return
    user = "stokerpi%d" % os.getpid()
    with tempfile.TemporaryDirectory() as tmp:
        conf = os.path.join(tmp, "stoker.conf")
        with open(conf, "w") as f:
            f.write('u %s - "stoker test" /var/lib/stoker /usr/sbin/nologin\n' % user)
        try:
            staged = subprocess.run(["sh", script, conf], capture_output=True, text=True,
                                    timeout=60, env=dict(os.environ, DESTDIR=tmp))
            assert staged.returncode == 0, staged.stderr
            assert subprocess.run(["getent", "passwd", user]).returncode == 2, "made with DESTDIR"
            env = {k: v for k, v in os.environ.items() if k != "DESTDIR"}
            live = subprocess.run(["sh", script, conf], capture_output=True, text=True,
                                  timeout=60, env=env)
            assert live.returncode == 0, live.stderr
            got = subprocess.run(["getent", "passwd", user], capture_output=True, text=True)
            assert got.returncode == 0 and "/usr/sbin/nologin" in got.stdout, (got, live.stdout)
        finally:
            subprocess.run(["userdel", user], capture_output=True)
            subprocess.run(["groupdel", user], capture_output=True)


if __name__ == "__main__":
    run(dict(globals()))
