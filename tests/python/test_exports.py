"""libstoker.so's dynamic symbol table: it exports the stoker_* API and nothing else (the
version script common/libstoker.map keeps conn_*, idset_* and the other internals local), and
every libstoker function the Python package calls is among the exports and resolves through
ctypes. Lists the symbols with nm (STOKER_NM); does not test what the functions do."""

import os
import re
import subprocess
import sys

from helpers import SKIP, run

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.environ.get("STOKER_SOURCE_ROOT", os.path.join(HERE, "..", ".."))
LIB = os.environ.get("STOKER_LIB", "build/common/libstoker.so")
NM = os.environ.get("STOKER_NM", "nm")

# Symbols the linker itself may define in a shared object; nothing of ours.
TOOLCHAIN = {"_init", "_fini", "__bss_start", "_edata", "_end"}


def exported():
    """{name: nm type letter} of the defined dynamic symbols of LIB."""
    try:
        out = subprocess.run([NM, "-D", "--defined-only", LIB], check=True, capture_output=True,
                             text=True).stdout
    except FileNotFoundError:
        print("SKIP: %s (binutils) is not installed; set STOKER_NM" % NM)
        sys.exit(SKIP)
    symbols = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            symbols[parts[2].split("@")[0]] = parts[1]
    assert symbols, "nm found no defined dynamic symbols in %s" % LIB
    return symbols


def test_only_stoker_symbols_are_exported():
    bad = sorted(s for s in exported() if not s.startswith("stoker_") and s not in TOOLCHAIN)
    assert not bad, "%s exports %d symbols outside the stoker_ namespace: %s" % (
        LIB, len(bad), ", ".join(bad))


def test_the_exports_are_the_public_api_only():
    # What a C user or a binding needs, not the internals: no generated protobuf code
    # (stoker__*), at most 150 functions, and each of them named in the version script.
    symbols = exported()
    generated = sorted(s for s in symbols if s.startswith("stoker__"))
    assert not generated, "%d generated protobuf symbols exported, e.g. %s" % (
        len(generated), ", ".join(generated[:3]))
    functions = sorted(s for s, kind in symbols.items() if kind == "T" and s not in TOOLCHAIN)
    assert len(functions) <= 150, "%d functions exported (at most 150)" % len(functions)
    with open(os.path.join(SOURCE_ROOT, "common", "libstoker.map")) as f:
        named = set(re.findall(r"^\s*(stoker_[a-z0-9_]+);", f.read(), re.M))
    assert set(functions) == named, "exported but not named: %s; named but not exported: %s" % (
        sorted(set(functions) - named), sorted(named - set(functions)))


def test_the_public_api_is_exported():
    symbols = exported()
    for name in ("stoker_consumer_open", "stoker_consumer_next", "stoker_strerror",
                 "stoker_status_json_opts", "stoker_log_set_level"):
        assert symbols.get(name) == "T", "%s does not export the function %s" % (LIB, name)


def test_every_function_the_python_package_calls_is_exported():
    package = os.path.join(SOURCE_ROOT, "python", "stoker")
    called = set()
    for fname in os.listdir(package):
        if fname.endswith(".py"):
            with open(os.path.join(package, fname)) as f:
                text = f.read()
            called |= set(re.findall(r"\.(stoker_[a-z0-9_]+)\s*\(", text))  # lib.stoker_x(...)
            called |= set(re.findall(r'^\s*"(stoker_[a-z0-9_]+)":', text, re.M))  # _declare's sigs
    assert "stoker_consumer_open" in called, "found no stoker_* calls in %s" % package
    symbols = exported()
    missing = sorted(c for c in called if symbols.get(c) != "T")
    assert not missing, "python/stoker calls %s, which %s does not export" % (
        ", ".join(missing), LIB)


def test_the_python_package_loads_the_library():
    from stoker import _lib
    lib = _lib.load()  # declares every function it uses; raises naming a missing one
    assert lib.stoker_consumer_api_version() == _lib.API_VERSION


if __name__ == "__main__":
    run(globals())
