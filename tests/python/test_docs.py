"""The Python examples of README.md, docs/python.md and docs/durability.md run as written: each
```python block is saved to a file and run by a fresh interpreter against a real broker with two
real producers, its documented address (tcp://localhost:7070) replaced by the test broker's. A
block written for data-parallel ranks says how it is run (`python3 -m stoker.launch
--nproc-per-node N SCRIPT URL`): it runs so, as written, N ranks with the address as their
argument, against a finite supply. A block that raises, exits non-zero, or talks to no broker fails
the test."""

import os
import re
import socket
import subprocess
import sys
import tempfile

from helpers import BROKER, PRODUCER, Cluster, require, run

require("numpy")
require("torch")
import stoker  # noqa: E402

ROOT = os.environ.get("STOKER_SOURCE_ROOT",
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOCUMENTED_URL = "tcp://localhost:7070"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
# A DDP block's run line: "python3 -m stoker.launch --nproc-per-node 2 train_ddp.py URL".
LAUNCH = re.compile(r"python3 -m stoker\.launch --nproc-per-node (\d+) \S+\.py " +
                    re.escape(DOCUMENTED_URL))


def blocks(doc):
    with open(os.path.join(ROOT, doc)) as f:
        return BLOCK.findall(f.read())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_block(doc, i, code):
    assert DOCUMENTED_URL in code, "%s block %d does not use %s" % (doc, i, DOCUMENTED_URL)
    launch = LAUNCH.search(code)
    ranks = int(launch.group(1)) if launch else 0
    assert ranks or "stoker.launch" not in code, \
        "%s block %d names stoker.launch but no run line this test knows" % (doc, i)
    with Cluster() as c, tempfile.TemporaryDirectory(prefix="stoker-doc-") as tmp:
        for k in range(2):
            finite = ["--max-examples", "640"] if ranks else []
            c.producer("--delay", "0:0", "--chunk", "64", "--seed", str(k + 1), *finite)
        path = os.path.join(tmp, "%s-%d.py" % (os.path.basename(doc), i))
        with open(path, "w") as f:
            f.write(code.replace(DOCUMENTED_URL, c.url))
        if ranks:
            # As the block says: the launcher starts the ranks (its exit code is the first
            # failing rank's, 0 when all finished).
            p = subprocess.Popen([sys.executable, "-m", "stoker.launch", "--nproc-per-node",
                                  str(ranks), path, c.url], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, cwd=tmp)
            try:
                out, _ = p.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                p.terminate()  # the launcher ends its ranks
                p.communicate(timeout=30)
                raise AssertionError("%s block %d: the ranks did not finish in 180 s" % (doc, i))
            results = [(p.returncode, out.decode(errors="replace"))]
        else:
            p = subprocess.run([sys.executable, path], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=180, cwd=tmp)
            results = [(p.returncode, p.stdout.decode(errors="replace"))]
        for rc, out in results:
            print("--- %s block %d (exit %d):\n%s" % (doc, i, rc, out[-1500:]))
            assert rc == 0, "%s block %d failed" % (doc, i)
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


def test_durability_python_examples_run_as_written():
    # The checkpoint example (Client(commit=True), state_dict) moved here from the README.
    found = blocks("docs/durability.md")
    assert len(found) >= 1, "no ```python block in docs/durability.md"
    for i, code in enumerate(found):
        run_block("docs/durability.md", i, code)


def test_groups_ddp_commands_run_as_written():
    # docs/groups.md: train_ddp.py (its ```python block) and the ```sh block that starts a broker,
    # a producer and the two ranks with python3 -m stoker.launch, run as written: the port 7070
    # becomes a free one, the programs are the build's, python3 is this interpreter.
    import shlex
    import time
    with open(os.path.join(ROOT, "docs/groups.md")) as f:
        doc = f.read()
    code = [b for b in BLOCK.findall(doc) if "train_ddp.py" in b]
    sh = [b for b in re.findall(r"^```sh\n(.*?)^```", doc, re.S | re.M) if "stoker.launch" in b]
    assert len(code) == 1 and len(sh) == 1, "docs/groups.md: no train_ddp.py or launch block"
    port = str(free_port())
    progs = {"stoker-broker": BROKER, "stoker-producer": PRODUCER, "python3": sys.executable}
    with tempfile.TemporaryDirectory(prefix="stoker-doc-") as tmp:
        with open(os.path.join(tmp, "train_ddp.py"), "w") as f:
            f.write(code[0])
        background = []
        try:
            lines = [ln.strip() for ln in sh[0].splitlines() if ln.strip()]
            for ln in lines:
                words = shlex.split(ln.replace("7070", port))
                bg = words[-1] == "&"
                words = [progs.get(words[0], words[0])] + words[1:len(words) - bg]
                if bg:
                    background.append(subprocess.Popen(words, cwd=tmp, stdout=subprocess.DEVNULL,
                                                       stderr=subprocess.DEVNULL))
                    if len(background) == 1:
                        time.sleep(0.3)  # the broker listens (the producer retries anyway)
                    continue
                t0 = time.monotonic()
                p = subprocess.run(words, cwd=tmp, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=120)
                out = p.stdout.decode(errors="replace")
                print("--- %s (exit %d, %.1f s):\n%s" % (ln, p.returncode, time.monotonic() - t0,
                                                        out[-3000:]))
                assert p.returncode == 0, "the launch failed"
                # Two ranks print to one pipe: a line may run into the other rank's.
                ends = re.findall(r"rank (\d): (\d+) steps, loss [0-9.]+; (.*?)"
                                  r"(?=rank \d: \d+ steps|$)", out, re.M)
                assert sorted(r for r, _, _ in ends) == ["0", "1"], out
                assert len({(n, e) for _, n, e in ends}) == 1, ends  # same steps, same end
        finally:
            for q in background:
                q.kill()
                q.wait()


run(globals())
