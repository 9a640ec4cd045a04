"""pip install, as a user does it: `python3 -m build --wheel --no-isolation` makes the
wheel from the source tree, `pip install --no-build-isolation` installs from the source tree,
and each goes into a fresh virtual environment (--system-site-packages for numpy and torch).
Then, from a directory that is not the checkout and with no PYTHONPATH or STOKER_LIB:
`import stoker` finds the package's own libstoker.so, stoker.__version__ is meson.build's, the
wheel's stoker-broker, stoker-producer and stoker-pull run, and README.md's PyTorch loop trains
against that broker and its producers, as written (its URL replaced by the test broker's).

Each build compiles on its own (about a minute here): meson-python 0.12.0 cannot reuse a
-Cbuilddir with Debian's meson 1.0.1 (it reconfigures a directory meson has not set up yet).
Prints the wheel's size and what it holds."""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from helpers import SKIP, reap, run  # noqa: E402

SRC = os.environ.get("STOKER_SOURCE_ROOT", ".")
VERSION = os.environ["STOKER_VERSION"]
PY = "/usr/bin/python3"
WORK = tempfile.mkdtemp(prefix="stoker-wheel-")
ELSEWHERE = os.path.join(WORK, "elsewhere")  # the user's own directory: not the checkout
CLEAN_ENV = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "STOKER_LIB", "LD_LIBRARY_PATH", "LD_PRELOAD")}
state = {}


def need_tools():
    missing = []
    for module, pkg in (("mesonpy", "python3-mesonpy"), ("build", "python3-build"),
                        ("venv", "python3-venv")):
        if subprocess.run([PY, "-c", "import " + module], capture_output=True).returncode:
            missing.append(pkg)
    if shutil.which("patchelf") is None:  # meson-python asks for it
        missing.append("patchelf")
    if subprocess.run([PY, "-c", "import ensurepip"], capture_output=True).returncode:
        missing.append("python3-venv")
    if missing:
        print("SKIP: %s not installed (scripts/deps.sh installs them as root)" % " ".join(missing))
        sys.exit(SKIP)


def sh(cmd, timeout=900, **kw):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                         env=kw.pop("env", CLEAN_ENV), **kw)
    assert out.returncode == 0, "%s failed (%d):\n%s\n%s" % (
        " ".join(cmd), out.returncode, out.stdout[-4000:], out.stderr[-4000:])
    return out.stdout


def venv(name):
    path = os.path.join(WORK, name)
    sh([PY, "-m", "venv", "--system-site-packages", path])
    return path


def test_build_wheel_no_isolation():
    t0 = time.monotonic()
    sh([PY, "-m", "build", "--wheel", "--no-isolation", "--outdir", os.path.join(WORK, "dist"),
        SRC], timeout=1800)
    [wheel] = glob.glob(os.path.join(WORK, "dist", "stoker-*.whl"))
    state["wheel"] = wheel
    name = os.path.basename(wheel)
    assert name.startswith("stoker-%s-" % VERSION), name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        infos = {i.filename: i for i in z.infolist()}
    data = "stoker-%s.data/scripts/" % VERSION
    for binary in ("stoker-broker", "stoker-producer", "stoker-pull"):
        assert data + binary in names, "%s not in the wheel: %s" % (binary, names)
    for f in ("stoker/__init__.py", "stoker/_lib.py", "stoker/client.py", "stoker/torch.py",
              "stoker/libstoker.so"):
        assert f in names, "%s not in the wheel: %s" % (f, names)
    # Every module of python/stoker is in python/meson.build's list.
    ours = sorted("stoker/" + os.path.basename(p)
                  for p in glob.glob(os.path.join(SRC, "python/stoker/*.py")))
    assert set(ours) <= set(names), sorted(set(ours) - set(names))
    assert not [n for n in names if n.startswith("stoker/") and n.endswith(".h")]
    print("wheel %s: %d bytes (%.1f s to build); holds:" % (
        name, os.path.getsize(wheel), time.monotonic() - t0))
    for n in sorted(names):
        print("  %9d  %s" % (infos[n].file_size, n))


def test_pip_install_no_build_isolation_from_source():
    env_dir = venv("venv-pip")
    sh([os.path.join(env_dir, "bin", "pip"), "install", "--no-build-isolation", "--no-deps",
        "--no-index", SRC], timeout=1800)
    os.makedirs(ELSEWHERE, exist_ok=True)
    out = sh([os.path.join(env_dir, "bin", "python"), "-c",
              "import stoker, stoker._lib as L; print(stoker.__version__); "
              "print(stoker.__file__); print(L.load()._name)"], cwd=ELSEWHERE)
    version, where, lib = out.split()
    assert version == VERSION, (version, VERSION)
    assert where.startswith(env_dir), where
    assert lib == os.path.join(os.path.dirname(where), "libstoker.so"), lib


def readme_torch_loop(url):
    with open(os.path.join(SRC, "README.md")) as f:
        text = f.read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    [block] = [b for b in blocks if "StokerIterableDataset" in b]
    return block.replace("tcp://localhost:7070", url)


def test_wheel_in_a_fresh_venv_runs_the_readme_loop():
    assert "wheel" in state, "no wheel was built"
    env_dir = venv("venv-wheel")
    sh([os.path.join(env_dir, "bin", "pip"), "install", "--no-deps", "--no-index",
        state["wheel"]])
    os.makedirs(ELSEWHERE, exist_ok=True)
    python = os.path.join(env_dir, "bin", "python")
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode:
        print("SKIP: the README loop needs torch (python3-torch)")
        sys.exit(SKIP)
    for binary in ("stoker-broker", "stoker-producer", "stoker-pull"):
        out = sh([os.path.join(env_dir, "bin", binary), "--version"], cwd=ELSEWHERE)
        assert VERSION in out, (binary, out)
    url = "ipc://" + os.path.join(WORK, "broker.ipc")
    bindir = os.path.join(env_dir, "bin")
    broker = subprocess.Popen([os.path.join(bindir, "stoker-broker"), "--listen", url,
                               "--log-level", "error"], stdout=subprocess.PIPE, text=True,
                              cwd=ELSEWHERE, env=CLEAN_ENV)
    producers = []
    try:
        assert broker.stdout.readline().startswith("listening"), "the broker did not start"
        for i in range(2):
            producers.append(subprocess.Popen(
                [os.path.join(bindir, "stoker-producer"), "--broker", url, "--name", "p%d" % i,
                 "--delay", "0:0", "--log-level", "error"], cwd=ELSEWHERE, env=CLEAN_ENV))
        script = os.path.join(ELSEWHERE, "train.py")
        with open(script, "w") as f:
            f.write(readme_torch_loop(url))
        loop = subprocess.Popen([python, "train.py"], cwd=ELSEWHERE, env=CLEAN_ENV,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        [(rc, out, err)] = reap([loop], 300)
        assert rc == 0, (rc, out, err)
        assert "duplicates: 0" in out, out
        steps = [int(line.split()[0]) for line in out.splitlines() if line[:1].isdigit()]
        assert steps[-1] == 1000, out
    finally:
        for p in producers + [broker]:
            if p.poll() is None:
                p.kill()
            p.wait()


if __name__ == "__main__":
    need_tools()
    try:
        run(dict(globals()))
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
