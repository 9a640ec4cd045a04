"""The Python package's hand copies of libstoker's C constants against the C headers they copy:
the error codes, dtypes, event kinds and log levels in python/stoker/_lib.py, the options struct
and STOKER_API_VERSION / STOKER_MAX_RANK, name for name and value for value. Reads the headers
as text (no compiler, no library); does not test behaviour (test_api.py does)."""

import ast
import ctypes
import os
import re
import struct

from helpers import run

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.environ.get("STOKER_SOURCE_ROOT", os.path.join(HERE, "..", ".."))
INCLUDE = os.path.join(SOURCE_ROOT, "common", "include", "stoker")
LIB_PY = os.path.join(SOURCE_ROOT, "python", "stoker", "_lib.py")

from stoker import _lib  # noqa: E402  (pure Python: importing does not load libstoker.so)


def header(name):
    """The header's text without comments."""
    with open(os.path.join(INCLUDE, name)) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def c_enum(header_name, enum_name):
    """{NAME: value} of `typedef enum enum_name { ... }` in the header, implicit values counted
    the way C counts them."""
    m = re.search(r"typedef\s+enum\s+%s\s*\{(.*?)\}" % enum_name, header(header_name), re.S)
    assert m, "enum %s not found in %s" % (enum_name, header_name)
    values, nxt = {}, 0
    for item in m.group(1).split(","):
        item = item.strip()
        if not item:
            continue
        im = re.fullmatch(r"([A-Z_][A-Z0-9_]*)\s*(?:=\s*(-?\d+))?", item)
        assert im, "cannot read enumerator %r of %s" % (item, enum_name)
        nxt = int(im.group(2)) if im.group(2) is not None else nxt
        values[im.group(1)] = nxt
        nxt += 1
    assert values, "enum %s in %s is empty" % (enum_name, header_name)
    return values


def c_define(header_name, name):
    m = re.search(r"#\s*define\s+%s\s+(\d+)" % name, header(header_name))
    assert m, "#define %s not found in %s" % (name, header_name)
    return int(m.group(1))


def test_error_codes_match_stoker_err():
    c = c_enum("error.h", "stoker_err")
    # _lib.py copies the codes it acts on as module constants named after the C enumerator.
    copied = {k: v for k, v in vars(_lib).items()
              if isinstance(v, int) and not isinstance(v, bool) and "STOKER_" + k in c}
    for name in ("OK", "NO_PRODUCERS", "END_OF_DATA", "STALLED", "CONNECTION"):
        assert name in copied, "_lib.py no longer defines %s (stoker/error.h STOKER_%s)" % (
            name, name)
    for name, value in copied.items():
        assert value == c["STOKER_" + name], "_lib.%s = %d, stoker/error.h STOKER_%s = %d" % (
            name, value, name, c["STOKER_" + name])


def test_dtypes_match_stoker_dtype_name_value_and_size():
    c = c_enum("schema.h", "stoker_dtype")
    real = {k: v for k, v in c.items() if k not in ("STOKER_DTYPE_INVALID", "STOKER_DTYPE_COUNT")}
    by_value = {v: k for k, v in real.items()}
    assert sorted(_lib.DTYPES) == sorted(by_value), (
        "_lib.DTYPES has values %s, stoker/schema.h has %s" % (sorted(_lib.DTYPES),
                                                             sorted(by_value)))
    for value, (name, npdtype, fmt) in _lib.DTYPES.items():
        assert "STOKER_" + name.upper() == by_value[value], (
            "_lib.DTYPES[%d] is %r, stoker/schema.h says %s = %d" % (value, name,
                                                                   by_value[value], value))
        bits = 8 if name == "bool" else int(re.search(r"(\d+)$", name).group(1))
        assert int(npdtype[2:]) * 8 == bits, "%s: numpy dtype %r has the wrong size" % (
            name, npdtype)
        assert struct.calcsize("<" + fmt) * 8 == bits, "%s: struct format %r has the wrong " \
            "size" % (name, fmt)
        # bfloat16 travels as its raw uint16 patterns (numpy has no bfloat16).
        kind = {"bool": "b", "bfloat16": "u"}.get(name) or (
            "f" if name.startswith("float") else ("u" if name.startswith("uint") else "i"))
        assert npdtype[1] == kind, "%s: numpy dtype %r has the wrong kind" % (name, npdtype)


def test_event_kinds_match_stoker_event_kind():
    c = c_enum("protocol.h", "stoker_event_kind")
    real = {k: v for k, v in c.items() if k != "STOKER_EVENT_NONE"}
    assert sorted(_lib.EVENT_KINDS) == sorted(real.values()), (
        "_lib.EVENT_KINDS has values %s, stoker/protocol.h has %s" % (sorted(_lib.EVENT_KINDS),
                                                                    sorted(real.values())))
    for value, name in _lib.EVENT_KINDS.items():
        assert real.get("STOKER_EVENT_" + name.upper()) == value, (
            "_lib.EVENT_KINDS[%d] is %r, stoker/protocol.h STOKER_EVENT_%s = %s" % (
                value, name, name.upper(), real.get("STOKER_EVENT_" + name.upper())))


def test_log_levels_match_stoker_log_level():
    c = c_enum("log.h", "stoker_log_level")
    # load() maps STOKER_LOG_LEVEL's words to numbers in a local dict literal named `levels`.
    with open(LIB_PY) as f:
        tree = ast.parse(f.read())
    found = None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "levels"):
            found = ast.literal_eval(node.value)
    assert found, "_lib.py has no `levels = {...}` dict any more; update this test"
    assert len(found) == len(c), "_lib.py levels %s, stoker/log.h %s" % (found, c)
    for word, value in found.items():
        assert c.get("STOKER_LOG_" + word.upper()) == value, (
            "_lib.py level %r = %d, stoker/log.h STOKER_LOG_%s = %s" % (
                word, value, word.upper(), c.get("STOKER_LOG_" + word.upper())))


def test_api_version_and_max_rank_match_the_headers():
    assert _lib.API_VERSION == c_define("consumer.h", "STOKER_API_VERSION"), (
        "_lib.API_VERSION %d, stoker/consumer.h STOKER_API_VERSION %d" % (
            _lib.API_VERSION, c_define("consumer.h", "STOKER_API_VERSION")))
    assert _lib.MAX_RANK == c_define("schema.h", "STOKER_MAX_RANK"), (
        "_lib.MAX_RANK %d, stoker/schema.h STOKER_MAX_RANK %d" % (
            _lib.MAX_RANK, c_define("schema.h", "STOKER_MAX_RANK")))
    assert _lib.NAME_MAX == c_define("schema.h", "STOKER_NAME_MAX"), (
        "_lib.NAME_MAX %d, stoker/schema.h STOKER_NAME_MAX %d" % (
            _lib.NAME_MAX, c_define("schema.h", "STOKER_NAME_MAX")))


def test_options_struct_matches_stoker_consumer_options():
    m = re.search(r"typedef\s+struct\s+stoker_consumer_options\s*\{(.*?)\}", header("consumer.h"),
                  re.S)
    assert m, "struct stoker_consumer_options not found in stoker/consumer.h"
    ctypes_of = {"uint32_t": ctypes.c_uint32, "const char *": ctypes.c_char_p}
    fields = []
    for decl in m.group(1).split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        dm = re.fullmatch(r"(.*?)\s*([a-z_][a-z0-9_]*)", decl)
        ctype = dm.group(1).strip()
        assert ctype in ctypes_of, "stoker_consumer_options.%s has type %r this test does not " \
            "know" % (dm.group(2), ctype)
        fields.append((dm.group(2), ctypes_of[ctype]))
    assert _lib.Options._fields_ == fields, "_lib.Options %s, stoker/consumer.h %s" % (
        _lib.Options._fields_, fields)


if __name__ == "__main__":
    run(globals())
