"""Finding and describing libstoker.so for ctypes.

The library is looked up in this order: the path in the environment variable STOKER_LIB; the
package's own copy next to this file (stoker/libstoker.so, as `pip install` puts it); the build
tree next to this package (../../build/common/libstoker.so, for a checkout built with meson in
build/); the system's library path (ctypes.util.find_library, after `meson install` or with the
Debian package libstoker0).
Its API version (STOKER_API_VERSION in stoker/consumer.h) must be the one this package speaks.
"""

import ctypes
import ctypes.util
import os

API_VERSION = 5

# stoker_err codes (stoker/error.h) this package acts on.
OK = 0
NO_PRODUCERS = 2
END_OF_DATA = 3
TOO_LARGE = 10
TIMEOUT = 13
CONNECTION = 15
STALLED = 16
INTERRUPTED = 17
GROUP_BROKEN = 21
DATASET_MISMATCH = 22
SHARD_REVOKED = 23
TLS = 24

# stoker_dtype (stoker/schema.h) -> (name, numpy dtype string, struct format for memoryview)
DTYPES = {
    1: ("float32", "<f4", "f"),
    2: ("float64", "<f8", "d"),
    3: ("int32", "<i4", "i"),
    4: ("int64", "<i8", "q"),
    5: ("uint8", "|u1", "B"),
    6: ("int8", "|i1", "b"),
    7: ("int16", "<i2", "h"),
    8: ("uint16", "<u2", "H"),
    9: ("float16", "<f2", "e"),
    # numpy has no bfloat16: the raw 16-bit patterns (a float32's upper half); Batch gives a
    # torch.bfloat16 tensor instead when torch is installed (docs/schema.md).
    10: ("bfloat16", "<u2", "H"),
    11: ("bool", "|b1", "?"),
}

EVENT_KINDS = {1: "producer_joined", 2: "producer_lost", 3: "producer_finished",
               4: "producer_reconnected", 15: "epoch_end", 520: "scaled",
               600: "broker_restarted", 700: "job_detached", 701: "job_remaking"}

MAX_RANK = 8  # STOKER_MAX_RANK
NAME_MAX = 64  # STOKER_NAME_MAX, the NUL included: names (a job's) of 1..63 bytes


class Options(ctypes.Structure):
    """stoker_consumer_options."""
    _fields_ = [
        ("api_version", ctypes.c_uint32),
        ("url", ctypes.c_char_p),
        ("token", ctypes.c_char_p),
        ("token_file", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("batch_size", ctypes.c_uint32),
        ("prefetch", ctypes.c_uint32),
        ("stall_timeout_ms", ctypes.c_uint32),
        ("connect_timeout_ms", ctypes.c_uint32),
        ("tls_ca", ctypes.c_char_p),
        ("tls_cert", ctypes.c_char_p),
        ("tls_key", ctypes.c_char_p),
        ("tls_insecure", ctypes.c_uint32),
        ("max_tokens", ctypes.c_uint32),
        ("buckets", ctypes.c_uint32),
        ("pack", ctypes.c_uint32),
        ("pack_whole", ctypes.c_uint32),
        ("mix", ctypes.c_char_p),
        ("mix_stop", ctypes.c_char_p),
        ("mix_schedule", ctypes.c_char_p),
        ("mix_blend", ctypes.c_char_p),
        ("job", ctypes.c_char_p),
    ]


def _candidates():
    env = os.environ.get("STOKER_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libstoker.so")
    yield os.path.normpath(os.path.join(here, "..", "..", "build", "common", "libstoker.so"))
    found = ctypes.util.find_library("stoker")
    if found:
        yield found


def _declare(lib):
    c = ctypes
    P = c.c_void_p
    u32, u64, i = c.c_uint32, c.c_uint64, c.c_int
    sigs = {
        "stoker_consumer_api_version": (i, []),
        "stoker_consumer_options_init": (None, [c.POINTER(Options)]),
        "stoker_consumer_open": (i, [c.POINTER(Options), c.POINTER(P), c.c_char_p, c.c_size_t]),
        "stoker_consumer_open_group": (i, [c.POINTER(Options), c.c_char_p, u32, u32,
                                           c.POINTER(P), c.c_char_p, c.c_size_t]),
        "stoker_consumer_open_group_at": (i, [c.POINTER(Options), c.c_char_p, u32, u32, u64, i,
                                              c.POINTER(P), c.c_char_p, c.c_size_t]),
        "stoker_consumer_group_steps": (u64, [P]),
        "stoker_consumer_group_leftover": (u64, [P]),
        "stoker_consumer_schema": (None, [P, c.c_char_p, c.c_size_t]),
        "stoker_consumer_n_fields": (u32, [P]),
        "stoker_consumer_field_name": (c.c_char_p, [P, u32]),
        "stoker_consumer_field_dtype": (i, [P, u32]),
        "stoker_consumer_field_shape": (i, [P, u32, c.POINTER(u32), u32]),
        "stoker_consumer_field_variable": (i, [P, u32, c.POINTER(u32)]),
        "stoker_consumer_next": (i, [P, c.POINTER(P)]),
        "stoker_consumer_next_within": (i, [P, c.POINTER(P), u32]),
        "stoker_consumer_release": (None, [P, P]),
        "stoker_consumer_ack": (None, [P, P]),
        "stoker_consumer_set_commit": (None, [P, i]),
        "stoker_consumer_commit": (i, [P]),
        "stoker_consumer_uncommitted": (u64, [P]),
        "stoker_consumer_flush": (i, [P]),
        "stoker_consumer_batch_free": (None, [P]),
        "stoker_consumer_batch_count": (u32, [P]),
        "stoker_consumer_batch_shared": (i, [P]),
        "stoker_consumer_delivery": (c.c_char_p, [P]),
        "stoker_consumer_delivery_counts": (None, [P, c.POINTER(u64), c.POINTER(u64),
                                                   c.POINTER(u64)]),
        "stoker_consumer_batch_field": (i, [P, u32, c.POINTER(P), c.POINTER(i), c.POINTER(u32),
                                            c.POINTER(u32), c.POINTER(u64), c.POINTER(u64)]),
        "stoker_consumer_batch_offsets": (i, [P, u32, c.POINTER(P), c.POINTER(u64)]),
        "stoker_consumer_batch_n_runs": (u32, [P]),
        "stoker_consumer_batch_run": (i, [P, u32, c.POINTER(u32), c.POINTER(u64),
                                          c.POINTER(u64), c.POINTER(u32)]),
        "stoker_consumer_batch_identities": (u32, [P, c.POINTER(u64), c.POINTER(u64), u32]),
        "stoker_consumer_batch_sources": (u32, [P, c.POINTER(u32), u32]),
        "stoker_consumer_set_mix": (i, [P, c.c_char_p, c.POINTER(u64)]),
        "stoker_consumer_batch_items": (u32, [P, c.POINTER(u32), c.POINTER(u64), u32]),
        "stoker_consumer_epochs_ended": (u32, [P]),
        "stoker_consumer_broker_restarts": (u32, [P, c.POINTER(u64), c.POINTER(u32)]),
        "stoker_consumer_poll_event": (i, [P, c.POINTER(i), c.POINTER(u32), c.c_char_p,
                                           c.c_size_t, c.POINTER(c.c_double), c.c_char_p,
                                           c.c_size_t]),
        "stoker_consumer_error": (c.c_char_p, [P]),
        "stoker_consumer_duplicates": (u64, [P]),
        "stoker_consumer_status_json": (i, [P, c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)]),
        "stoker_status_json_opts": (i, [c.POINTER(Options), u32, c.c_char_p, c.c_size_t,
                                        c.POINTER(c.c_size_t)]),
        "stoker_consumer_interrupt": (None, [P]),
        "stoker_consumer_close": (None, [P]),
        "stoker_strerror": (c.c_char_p, [i]),
        "stoker_version": (c.c_char_p, []),
        "stoker_errname": (c.c_char_p, [i]),
        "stoker_log_set_level": (None, [i]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


_lib = None


def defaults():
    """The library's consumer defaults (an Options filled by stoker_consumer_options_init): the
    Python API reads its defaults from here, so they are written once, in libstoker."""
    o = Options()
    load().stoker_consumer_options_init(ctypes.byref(o))
    return o


def load():
    """Returns the loaded library (loaded once); raises OSError naming where it looked."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        try:
            _declare(lib)
        except AttributeError as e:
            tried.append("%s (not a stoker consumer library: %s)" % (path, e))
            continue
        version = lib.stoker_consumer_api_version()
        if version != API_VERSION:
            raise OSError("%s has stoker API version %d; this package speaks version %d"
                          % (path, version, API_VERSION))
        level = os.environ.get("STOKER_LOG_LEVEL", "warn").lower()
        levels = {"error": 0, "warn": 1, "info": 2, "debug": 3}
        lib.stoker_log_set_level(levels.get(level, 1))
        _lib = lib
        return lib
    raise OSError("libstoker.so not found (set STOKER_LIB, build into build/, or meson install); "
                  "tried: " + ("; ".join(tried) if tried else "nothing"))
