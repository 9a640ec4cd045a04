"""docs/variable-length.md runs as written: its two ```python blocks are saved as the files they
name in their first line (make_shard.py, train.py) in a fresh directory, and its ```sh block runs
there in bash, line for line, with only what must differ on a test machine changed: the port 7070
becomes a free one, `build/...` and `python` are links to this build's binaries and package, and
`python3` is this interpreter; it runs under `set -e`, so a failing command fails it. Then: the
shard holds the documents make_shard.py says, every epoch trained each of them exactly once
(train.py checks within an epoch; here every epoch's count must be the shard's), and the loss
fell."""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile

from helpers import BROKER, PRODUCER, require, run

require("numpy")
require("torch")
# meson's timeout ends a test with SIGTERM: leave through the finally blocks (they end the
# page's processes) rather than die at once.
signal.signal(signal.SIGTERM, lambda *_: sys.exit("SIGTERM"))

ROOT = os.environ.get("STOKER_SOURCE_ROOT",
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOC = "docs/variable-length.md"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def doc_blocks():
    with open(os.path.join(ROOT, DOC)) as f:
        text = f.read()
    py = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    sh = re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M)
    return py, sh


def test_the_variable_length_loop_runs_as_written():
    py, sh = doc_blocks()
    files = {}
    for code in py:
        m = re.match(r"# (\w+\.py)", code)
        assert m, "%s: a python block does not name its file in its first line" % DOC
        files[m.group(1)] = code
    assert sorted(files) == ["make_shard.py", "train.py"], sorted(files)
    assert len(sh) == 1, "%s: expected one sh block, found %d" % (DOC, len(sh))
    script = sh[0]
    assert "7070" in script and "train.py" in script and "make_shard.py" in script, script
    port = str(free_port())
    with tempfile.TemporaryDirectory(prefix="stoker-doc-") as tmp:
        for name, code in files.items():
            with open(os.path.join(tmp, name), "w") as f:
                f.write(code.replace("7070", port))
        # What the page's commands expect of the repository's root, here as links.
        for path, target in (("build/server/stoker-broker", BROKER),
                             ("build/producer/stoker-producer", PRODUCER),
                             ("python", os.path.join(ROOT, "python")),
                             ("bin/python3", sys.executable)):
            os.makedirs(os.path.join(tmp, os.path.dirname(path)), exist_ok=True)
            os.symlink(os.path.abspath(target), os.path.join(tmp, path))
        env = dict(os.environ, PATH=os.path.join(tmp, "bin") + os.pathsep + os.environ["PATH"])
        # Its own process group, so that whatever the script leaves behind (its `kill $(jobs
        # -p)` ends the broker and the producer when it passes; not when a command fails) is
        # ended by the group's id as soon as bash returns. Output to a file: the background
        # processes would hold a pipe open past bash's end.
        log_path = os.path.join(tmp, "out.log")
        with open(log_path, "wb") as log:
            p = subprocess.Popen(["bash", "-c", "set -e\n" + script.replace("7070", port)],
                                 cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        try:
            rc = p.wait(timeout=200)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        with open(log_path, errors="replace") as f:
            out = f.read()
        print(out[-3000:])
        assert rc is not None, "the page's commands did not finish in 200 s"
        assert rc == 0, "the page's commands failed (exit %d)" % rc
    m = re.search(r"^shard\.bin: (\d+) documents, (\d+) tokens$", out, re.M)
    assert m, "make_shard.py did not say what it wrote"
    documents = int(m.group(1))
    epochs = re.findall(r"^epoch (\d+): (\d+) documents, each once, mean loss ([0-9.]+)$", out,
                        re.M)
    assert [int(e) for e, _, _ in epochs] == [0, 1, 2], epochs
    for e, n, _ in epochs:
        assert int(n) == documents, "epoch %s trained %s of the %d documents" % (e, n, documents)
    first, last = float(epochs[0][2]), float(epochs[-1][2])
    assert last < 0.5 * first, "the loss did not fall: %.3f, then %.3f" % (first, last)


run(globals())
