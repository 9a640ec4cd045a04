"""Writes a config file for /etc/stoker: the template (the settings and what they mean), then
every flag of the binary with its default, as comments, from the binary's own --help, so the
file lists exactly the flags of the version it is installed with.
usage: make_conf.py BINARY TEMPLATE OUTPUT SYSCONFDIR"""

import subprocess
import sys

binary, template, output, sysconfdir = sys.argv[1:5]
help_text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True,
                           timeout=30).stdout
name = binary.rsplit("/", 1)[-1]
with open(template) as f:
    text = f.read().replace("@sysconfdir@", sysconfdir)
lines = ["", "# Every flag of %s and its default (%s --help):" % (name, name), "#"]
lines += [("#   " + line).rstrip() for line in help_text.splitlines()]
with open(output, "w") as f:
    f.write(text + "\n".join(lines) + "\n")
