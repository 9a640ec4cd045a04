"""README.md's quickstarts 1 and 2 run in order as written: each ```sh block of the two sections
by bash -e in one temporary directory (python/ linked there, as in the checkout's root), quickstart 2's ```python block saved as train.py first, with
`scripts/build.sh` left out (this build is the one built) and `build/` meaning this build, ports
7070 and 9090 free ones. Each block must exit 0; quickstart 1's trainer writes summary.json with
discrepancy 0 and duplicates_seen 0, quickstart 2's loop prints "duplicates: 0", and no process
warns that its goodbye went unacknowledged (the producers are stopped before the broker).
usage: readme_quickstarts.py SOURCE_ROOT BUILD_ROOT (env: STOKER_LIB; python3 with torch)"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile

root, build = sys.argv[1], sys.argv[2]
try:
    import torch  # noqa: F401
except ImportError as e:
    print("SKIP: torch is not importable (%s); install python3-torch" % e)
    sys.exit(77)
with open(os.path.join(root, "README.md")) as f:
    readme = f.read()


def section(title):
    m = re.search(r"^## %s.*?(?=^## )" % re.escape(title), readme, re.S | re.M)
    assert m, "README.md has no section '%s'" % title
    return m.group(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ports = {"7070": str(free_port()), "9090": str(free_port())}


def as_here(text):
    text = re.sub(r"^scripts/build\.sh\n", "", text, flags=re.M)
    text = re.sub(r"(?<![\w/])build/", build + "/", text)
    for k, v in ports.items():
        text = text.replace(":" + k, ":" + v)
    return text


failed = 0


def check(what, ok, detail=""):
    global failed
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failed += 1
        print(detail[-4000:])


env = dict(os.environ, PATH="/usr/bin:/bin")
with tempfile.TemporaryDirectory(prefix="stoker-readme-") as tmp:
    q1 = re.findall(r"^```sh\n(.*?)^```", section("Quickstart 1"), re.S | re.M)
    q2 = section("Quickstart 2")
    code = re.findall(r"^```python\n(.*?)^```", q2, re.S | re.M)
    q2sh = re.findall(r"^```sh\n(.*?)^```", q2, re.S | re.M)
    check("quickstart 1 has one sh block, quickstart 2 a python and a sh block",
          len(q1) == 1 and len(code) == 1 and len(q2sh) == 1)
    # The README's commands run in the checkout's root: python/ is the package's folder there.
    os.symlink(os.path.join(root, "python"), os.path.join(tmp, "python"))
    with open(os.path.join(tmp, "train.py"), "w") as f:
        f.write(as_here(code[0]))
    outs = []
    for name, block in (("quickstart 1", q1[0]), ("quickstart 2", q2sh[0])):
        p = subprocess.Popen(["bash", "-e", "-c", as_here(block)], cwd=tmp, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        try:
            out, _ = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            out = "(did not end within 180 s)"
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        outs.append(out)
        check("%s exits 0" % name, p.returncode == 0, out)
        check("%s: no goodbye went unacknowledged" % name,
              "goodbye not acknowledged" not in out, out)
    try:
        with open(os.path.join(tmp, "summary.json")) as f:
            summary = json.load(f)
        audit = summary.get("audit", summary)
        ok = audit.get("discrepancy") == 0 and audit.get("duplicates_seen") == 0
    except (OSError, ValueError) as e:
        summary, ok = str(e), False
    check("quickstart 1: summary.json has discrepancy 0 and duplicates_seen 0", ok, str(summary))
    check("quickstart 2: the loop prints duplicates: 0",
          re.search(r"^duplicates: 0$", outs[1] if len(outs) > 1 else "", re.M) is not None,
          outs[-1])
print("%d failed" % failed)
sys.exit(1 if failed else 0)
