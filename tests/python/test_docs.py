"""The Python examples of README.md and docs/python.md run as written: each ```python block is
saved to a file and run by a fresh interpreter against a real broker with two real producers,
its documented address (tcp://localhost:7070) replaced by the test broker's. A block that raises,
exits non-zero, or talks to no broker fails the test."""

import os
import re
import subprocess
import sys
import tempfile

from helpers import Cluster, require, run

require("numpy")
require("torch")
import stoker  # noqa: E402

ROOT = os.environ.get("STOKER_SOURCE_ROOT",
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOCUMENTED_URL = "tcp://localhost:7070"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks(doc):
    with open(os.path.join(ROOT, doc)) as f:
        return BLOCK.findall(f.read())


def run_block(doc, i, code):
    assert DOCUMENTED_URL in code, "%s block %d does not use %s" % (doc, i, DOCUMENTED_URL)
    with Cluster() as c, tempfile.TemporaryDirectory(prefix="stoker-doc-") as tmp:
        for k in range(2):
            c.producer("--delay", "0:0", "--chunk", "64", "--seed", str(k + 1))
        path = os.path.join(tmp, "%s-%d.py" % (os.path.basename(doc), i))
        with open(path, "w") as f:
            f.write(code.replace(DOCUMENTED_URL, c.url))
        p = subprocess.run([sys.executable, path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=180, cwd=tmp)
        out = p.stdout.decode(errors="replace")
        print("--- %s block %d (exit %d):\n%s" % (doc, i, p.returncode, out[-1500:]))
        assert p.returncode == 0, "%s block %d failed" % (doc, i)
        st = stoker.status(c.url)["counters"]
        assert st["acknowledged"] > 0 and st["discrepancy"] == 0, st


def test_readme_python_examples_run_as_written():
    found = blocks("README.md")
    assert len(found) >= 1, "no ```python block in README.md"
    for i, code in enumerate(found):
        run_block("README.md", i, code)


def test_docs_python_examples_run_as_written():
    found = blocks("docs/python.md")
    assert len(found) >= 2, "fewer ```python blocks in docs/python.md than expected"
    for i, code in enumerate(found):
        run_block("docs/python.md", i, code)


run(globals())
