"""The systemd units and their config files (issue 30), as configured in this build:
`systemd-analyze verify` passes on each (with ExecStart pointed at this build's binaries, since
the installed paths do not exist here), each runs as the stoker user under the sandboxing
docs/operating.md lists and restarts on failure, and each config file names every flag of its
binary (its own --cli-table) with the default --help shows."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

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


if __name__ == "__main__":
    run(dict(globals()))
