"""What an installed stoker holds: `meson install` into a temporary DESTDIR, then, as
a user with only the installed files: every public header is there and compiles on its own
through `pkg-config --cflags stoker`, pkg-config names the project's version, and every example
of producer/examples/ compiles and links with `pkg-config --cflags --libs stoker` and runs
against the installed broker, its examples pulled back by the installed stoker-pull; the Python
package is installed with every module of python/stoker.

STOKER_INSTALLED_ROOT=DIR checks an existing root instead (the files of the Debian packages
unpacked into DIR, tests/packaging) without running meson install."""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from helpers import reap, run  # noqa: E402

SRC = os.environ.get("STOKER_SOURCE_ROOT", ".")
BUILD = os.environ.get("STOKER_BUILD_ROOT", "build")
VERSION = os.environ["STOKER_VERSION"]
PREFIX = os.environ.get("STOKER_PREFIX", "/usr/local")
LIBDIR = os.environ.get("STOKER_LIBDIR", "lib/x86_64-linux-gnu")
INCLUDEDIR = os.environ.get("STOKER_INCLUDEDIR", "include")
BINDIR = os.environ.get("STOKER_BINDIR", "bin")
EXTRA_CFLAGS = os.environ.get("STOKER_EXTRA_CFLAGS", "").split()
CC = os.environ.get("CC", "cc")

ROOT = None  # the DESTDIR (or STOKER_INSTALLED_ROOT)
WORK = tempfile.mkdtemp(prefix="stoker-installed-")


def at(path):
    """A path under the prefix, in the installed root."""
    return os.path.join(ROOT + PREFIX, path) if not os.path.isabs(path) else ROOT + path


def install():
    global ROOT
    given = os.environ.get("STOKER_INSTALLED_ROOT")
    if given:
        ROOT = given
        return
    ROOT = os.path.join(WORK, "root")
    out = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--quiet",
                          "--destdir", ROOT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, "meson install failed:\n%s%s" % (out.stdout, out.stderr)


def pkg_config(*args):
    env = dict(os.environ, PKG_CONFIG_PATH=at(os.path.join(LIBDIR, "pkgconfig")),
               PKG_CONFIG_LIBDIR="/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
    # The .pc file says prefix=PREFIX; the files lie under ROOT + PREFIX.
    out = subprocess.run(["pkg-config", "--define-variable=prefix=" + ROOT + PREFIX] +
                         list(args), capture_output=True, text=True, env=env, timeout=30)
    assert out.returncode == 0, ("pkg-config", args, out.stderr)
    return out.stdout.split()


def test_every_public_header_is_installed():
    ours = sorted(os.path.basename(p)
                  for p in glob.glob(os.path.join(SRC, "common/include/stoker/*.h")))
    installed = sorted(os.path.basename(p)
                       for p in glob.glob(at(os.path.join(INCLUDEDIR, "stoker/*.h"))))
    assert ours, "no headers under common/include/stoker"
    missing = sorted(set(ours) - set(installed))
    assert not missing, "public headers not installed: %s" % missing


def test_python_package_is_installed_whole():
    inits = glob.glob(os.path.join(ROOT, "**", "stoker", "__init__.py"), recursive=True)
    assert len(inits) == 1, inits
    installed = sorted(os.path.basename(p)
                       for p in glob.glob(os.path.join(os.path.dirname(inits[0]), "*.py")))
    ours = sorted(os.path.basename(p) for p in glob.glob(os.path.join(SRC, "python/stoker/*.py")))
    assert installed == ours, (installed, ours)


def test_python_package_is_where_the_system_python_looks():
    # Installed under /usr/local or /usr, `import stoker` must work with Debian's python3 and no
    # PYTHONPATH: the package's folder is one of that python's own sys.path entries.
    system_python = "/usr/bin/python3"
    if PREFIX not in ("/usr/local", "/usr") or not os.path.exists(system_python):
        return
    inits = glob.glob(os.path.join(ROOT, "**", "stoker", "__init__.py"), recursive=True)
    assert len(inits) == 1, inits
    site = os.path.dirname(os.path.dirname(inits[0]))[len(ROOT):]
    searched = python_path(system_python)
    assert site in searched, "the Python package went to %s, which %s does not search (%s)" % (
        site, system_python, ", ".join(searched))


def python_path(python):
    """The folders python searches for modules, run without PYTHONPATH."""
    out = subprocess.run([python, "-c", "import sys; print('\\n'.join(sys.path))"],
                         capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    return [p for p in out.stdout.split("\n") if p]


def test_a_bare_meson_install_puts_the_python_package_where_python3_looks():
    # `meson setup build && meson install` with no option given (not scripts/build.sh's, which
    # names the folder): the Python package goes where Debian's python3 finds it. Configured
    # only: meson says at setup where each file will be installed.
    system_python = "/usr/bin/python3"
    if (os.environ.get("STOKER_INSTALLED_ROOT") or not os.path.exists(system_python)
            or shutil.which("meson") is None):
        print("(skipped: a packaged root, or no /usr/bin/python3 or meson)")
        return
    bare = os.path.join(WORK, "bare")
    out = subprocess.run(["meson", "setup", bare, SRC], capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, "meson setup failed:\n%s%s" % (out.stdout, out.stderr)
    with open(os.path.join(bare, "meson-info", "intro-installed.json")) as f:
        installed = json.load(f)
    inits = [dst for dst in installed.values() if dst.endswith("/stoker/__init__.py")]
    assert len(inits) == 1, inits
    site = os.path.dirname(os.path.dirname(inits[0]))
    searched = python_path(system_python)
    assert site in searched, "a bare meson install puts the Python package into %s, which %s " \
        "does not search (%s)" % (site, system_python, ", ".join(searched))


def test_pkg_config_names_the_version_and_the_library():
    assert pkg_config("--modversion", "stoker") == [VERSION]
    libs = pkg_config("--libs", "stoker")
    assert "-lstoker" in libs, libs
    lib = at(os.path.join(LIBDIR, "libstoker.so"))
    assert os.path.exists(lib), "no %s" % lib


def test_each_public_header_compiles_alone():
    cflags = pkg_config("--cflags", "stoker")
    failed = []
    for h in sorted(glob.glob(at(os.path.join(INCLUDEDIR, "stoker/*.h")))):
        name = os.path.basename(h)
        src = os.path.join(WORK, "only_" + name + ".c")
        with open(src, "w") as f:
            f.write("#include <stoker/%s>\n#include <stoker/%s>\nint main(void) { return 0; }\n"
                    % (name, name))
        out = subprocess.run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only"] +
                             cflags + [src], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            failed.append("%s:\n%s" % (name, out.stderr))
    assert not failed, "headers that do not compile alone:\n" + "\n".join(failed)


def compile_example(src):
    exe = os.path.join(WORK, os.path.splitext(os.path.basename(src))[0])
    out = subprocess.run([CC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-o", exe, src] +
                         EXTRA_CFLAGS + pkg_config("--cflags", "--libs", "stoker") + ["-lm"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, "%s does not compile against the installed stoker:\n%s" % (
        src, out.stderr)
    return exe


def test_custom_generator_example_runs_against_the_installed_broker():
    exe = compile_example(os.path.join(SRC, "producer/examples/custom_generator.c"))
    env = dict(os.environ, LD_LIBRARY_PATH=at(LIBDIR))
    env.pop("STOKER_LIB", None)
    # The executable finds the installed libstoker.so, not the build tree's.
    ldd = subprocess.run(["ldd", exe], capture_output=True, text=True, env=env).stdout
    assert at(os.path.join(LIBDIR, "libstoker.so")) in ldd, ldd
    url = "ipc://" + os.path.join(WORK, "broker.ipc")
    broker = subprocess.Popen([at(os.path.join(BINDIR, "stoker-broker")), "--listen", url,
                               "--log-level", "error"], stdout=subprocess.PIPE, text=True,
                              env=env)
    gen = None
    try:
        assert broker.stdout.readline().startswith("listening"), "the broker did not start"
        gen = subprocess.Popen([exe, url], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
        pull = subprocess.run([at(os.path.join(BINDIR, "stoker-pull")), "--broker", url,
                               "--max-examples", "200", "--batch-size", "50",
                               "--stall-timeout", "20"],
                              capture_output=True, text=True, timeout=60, env=env)
        assert pull.returncode == 0, (pull.returncode, pull.stderr)
        lines = pull.stdout.splitlines()
        assert len(lines) == 200, len(lines)
        for line in lines:
            x, y, q = (float(v) for v in line.split())
            assert 0.6 < (x * x + y * y) ** 0.5 < 1.4, line  # on the unit circle, noise 0.05
            assert q in (0, 1, 2, 3), line
            quadrant = (0 if x >= 0 and y >= 0 else 1 if x < 0 and y >= 0 else
                        2 if x < 0 else 3)
            # Near an axis the noise may cross it; elsewhere the label is the quadrant.
            if min(abs(x), abs(y)) > 0.2:
                assert q == quadrant, line
        gen.send_signal(signal.SIGINT)
        [(rc, _, err)] = reap([gen], 20)
        # Ctrl-C ends it as it ends stoker-producer: what was made is pushed, exit 0.
        assert rc == 0 and "finished" in err, (rc, err)
    finally:
        for p in (gen, broker):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    try:
        install()
        run(dict(globals()))
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
