"""docs/autoscale.md's one-box recipe runs as written: the ```sh block of its "On one box" section
by bash -e in a temporary directory, with `build/` meaning this build and the port 7070 a free
one. It must exit 0 within 180 s; the controller must step the pool up at least once (a `scale:
pool 'aug' from 1 to N` line) by starting producers through the exec engine; the trainer's
summary.json must say completed with discrepancy 0 and duplicates_seen 0; every producer that
joined must have finished (said goodbye) rather than been lost, and none may be left running.
usage: autoscale_one_box.py SOURCE_ROOT BUILD_ROOT"""

import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile

root, build = sys.argv[1], sys.argv[2]
with open(os.path.join(root, "docs/autoscale.md")) as f:
    page = f.read()

failed = 0


def check(what, ok, detail=""):
    global failed
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failed += 1
        print(detail[-4000:])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


m = re.search(r"^## On one box\n(.*?)(?=^## )", page, re.S | re.M)
blocks = re.findall(r"^```sh\n(.*?)^```", m.group(1), re.S | re.M) if m else []
check("docs/autoscale.md has an 'On one box' section with one sh block", len(blocks) == 1)
if len(blocks) != 1:
    sys.exit(1)
script = re.sub(r"(?<![\w/])build/", build + "/", blocks[0]).replace(":7070",
                                                                    ":%d" % free_port())
env = dict(os.environ, PATH="/usr/bin:/bin")
with tempfile.TemporaryDirectory(prefix="stoker-autoscale-doc-") as tmp:
    p = subprocess.Popen(["bash", "-e", "-c", script], cwd=tmp, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
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
    shown = "\n".join(ln for ln in out.splitlines() if not ln.startswith("round "))
    check("the recipe exits 0", p.returncode == 0, shown)
    steps = re.findall(r"^scale: pool 'aug' from (\d+) to (\d+):", out, re.M)
    check("the controller stepped the pool up (%s)" % ", ".join("%s->%s" % s for s in steps),
          any(int(b) > int(a) for a, b in steps), shown)
    joined = len(re.findall(r"producer-joined: ", out))
    finished = len(re.findall(r"producer-finished: ", out))
    check("more than one producer joined (%d), every one finished (%d), none lost" %
          (joined, finished), joined > 1 and finished == joined and "producer-lost" not in out,
          shown)
    try:
        with open(os.path.join(tmp, "summary.json")) as f:
            summary = json.load(f)
        audit = summary.get("audit") or {}
        ok = (summary.get("status") == "completed" and audit.get("discrepancy") == 0
              and audit.get("duplicates_seen") == 0)
    except (OSError, ValueError) as e:
        summary, ok = str(e), False
    check("summary.json: completed, discrepancy 0, duplicates_seen 0", ok, str(summary))
    left = []
    for pidfile in glob.glob(os.path.join(tmp, "producers", "*.pid")):
        with open(pidfile) as f:
            pid = int(f.read().strip() or 0)
        if pid > 0 and alive(pid):
            left.append(pid)
            os.kill(pid, signal.SIGKILL)
    check("no producer left running", not left, "still running: %s" % left)
print("%d failed" % failed)
sys.exit(1 if failed else 0)
