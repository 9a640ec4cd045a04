"""docs/groups.md's checkpoint example runs as written: its train_ckpt.py block saved as a file
and the shell block after it run in order by bash in a temporary directory, with the build's
binaries first on PATH and a free port for 7070. The first run must die at step 50, the second
resume at step 40 on both ranks and end, and the broker must have acknowledged each of the
2,000 examples once (status: acknowledged 2000, discrepancy 0).
usage: groups_checkpoint.py SOURCE_ROOT (env: STOKER_BIN_DIRS, STOKER_LIB, PYTHONPATH)"""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile

root = sys.argv[1]
try:
    import torch  # noqa: F401
except ImportError as e:
    print("SKIP: torch is not importable (%s); install python3-torch" % e)
    sys.exit(77)
with open(os.path.join(root, "docs/groups.md")) as f:
    page = f.read()
m = re.search(r"^```python\n(# train_ckpt\.py:.*?)^```\n\n```bash\n(.*?)^```", page, re.S | re.M)
assert m, "docs/groups.md has no train_ckpt.py block followed by a bash block"
script, recipe = m.group(1), m.group(2)
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
recipe = recipe.replace(":7070", ":%d" % port)
env = dict(os.environ)
env["PATH"] = os.pathsep.join(os.environ["STOKER_BIN_DIRS"].split(":") + ["/usr/bin", "/bin"])
with tempfile.TemporaryDirectory(prefix="stoker-ckpt-doc-") as tmp:
    with open(os.path.join(tmp, "train_ckpt.py"), "w") as f:
        f.write(script)
    with open(os.path.join(tmp, "recipe.sh"), "w") as f:
        f.write(recipe + "wait\n")
    p = subprocess.Popen(["bash", "recipe.sh"], cwd=tmp, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        out = "(the recipe did not end within 240 s)"
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)  # anything the recipe left behind
        except ProcessLookupError:
            pass
        p.wait()
print(out[-6000:])
checks = [
    ("the first run dies at step 50", "rank 0: killed at step 50" in out),
    ("both ranks resume at step 40", len(re.findall(r"rank \d: resumed at step 40", out)) == 2),
    ("both ranks reach the end", len(re.findall(r"rank \d: done at step \d+", out)) == 2),
    ("the broker acknowledged 2000", re.search(r"^acknowledged +2000$", out, re.M) is not None),
    ("discrepancy 0", re.search(r"^discrepancy +0$", out, re.M) is not None),
]
failed = 0
for what, ok in checks:
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    failed += not ok
print("%d passed, %d failed" % (len(checks) - failed, failed))
sys.exit(1 if failed else 0)
