"""stoker.Client: batches from a stoker broker as dicts of numpy arrays (or memoryviews).

Memory: a batch's arrays are views of the received message, not copies. The memory stays valid
as long as anything refers to it (the batch or any of its arrays, or a tensor made from one with
torch.from_numpy); it is freed when the last reference is gone, and never reused before. Release
(acknowledgement) and memory are separate: releasing a batch tells the broker you are done with
it, but keeping an array from it afterwards is still safe (it just keeps that memory alive).
"""

import ctypes
import json
import os
import time
from collections import namedtuple

from . import _lib

try:
    import numpy as _np
except ImportError:  # memoryviews instead
    _np = None

# The longest single wait inside the library (see Client.next_batch): how late Ctrl-C may be.
_SLICE_S = 0.1


class StokerError(Exception):
    """A stoker failure. code is the stoker_err code, name its word ("stalled", ...), reason why
    (the broker's reason where it gave one), said once: str(e) is what happened and the reason
    ("stalled: no batch within 4.0 s"), e.reason the reason alone."""

    what = None  # what happened, said before the reason in str(e) (the subclasses')

    def __init__(self, code, reason):
        super().__init__(reason)
        self.code = code
        self.reason = reason
        lib = _lib._lib
        self.name = lib.stoker_errname(code).decode() if lib is not None else str(code)

    def __str__(self):
        return "%s: %s" % (self.what, self.reason) if self.what else str(self.reason)


class SupplyEnded(StokerError):
    """The data supply ended: every producer was lost or finished and nothing is queued.
    finished is True when all of them finished cleanly (END_OF_DATA). For a rank of a group,
    leftover is the number of examples too few to give every rank one more (still queued at the
    broker, reported in the reason too); None otherwise."""

    leftover = None
    what = "data supply ended"

    @property
    def finished(self):
        return self.code == _lib.END_OF_DATA


class Stalled(StokerError):
    """No batch arrived within the stall timeout."""

    what = "stalled"


class TLSError(StokerError):
    """The TLS handshake with the broker failed, and will not succeed by waiting: the reason says
    why (the broker's certificate not signed by tls_ca, or not naming the URL's host; a client
    certificate the broker requires or refuses; a tcp:// URL to a broker that speaks TLS, or a
    tls+tcp:// URL to one that does not). Raised within about a second of connecting."""


class GroupBroken(StokerError):
    """A rank of this client's group died or left before the end (its reason names the rank):
    no further step can come. Under torchrun, exit and let it restart the group."""


class BrokerRestarted(StokerError):
    """Client.epochs(): the broker serving the dataset restarted (it was replaced by a new
    process on its address) while an Epoch was iterated. A broker keeps its epochs in memory, so
    the new one starts them anew from epoch 0: the Epoch stops here rather than go on with
    another broker's items. epoch is the number of the Epoch that stopped, uptime the new
    broker's uptime in seconds when the client noticed. Call epochs() again to go on with the new
    broker's epochs (its first batch is kept for them, not lost)."""

    what = "broker restarted"

    def __init__(self, reason, epoch, uptime):
        super().__init__(_lib.CONNECTION, reason)
        self.epoch = epoch
        self.uptime = uptime


Event = namedtuple("Event", "kind producer name at reason")
Event.__doc__ = """A broker event: kind is "producer_joined", "producer_lost", "producer_finished",
"producer_reconnected", "epoch_end", "scaled" or "broker_restarted"; producer the broker's id,
name the producer's name (for "scaled": the pool; for "broker_restarted": the URL), at the
broker's uptime in seconds, reason the broker's reason (for producer_lost; for "scaled": "from N
to M (ENGINE): why"). "broker_restarted" is the client's own: its hello was answered by another
broker instance than before (the broker restarted: its epochs and a group's steps start anew),
said before any batch of the new broker (see BrokerRestarted and Client.broker_restarts); producer
is 0, at 0."""

# A trainer the broker did not know is told who is there with events of this reason: the sign
# of a new broker (or of one that forgot this trainer), checked against the broker's uptime.
_SNAPSHOT_REASON = "already there when this trainer joined"
# The broker's uptime is said in milliseconds: its start, reckoned from it, is known to this
# and to the request's round trip (between sending and the answer); and the broker's clock may
# run apart from this host's, by far less than this share of the time (a restart moves the start
# by the old broker's whole life).
_UPTIME_ROUNDING_S = 0.002
_CLOCK_DRIFT = 1e-3
# A batch that took this long to come is checked for a restart (one always makes the client wait
# unless it was hidden behind prefetched batches, which the snapshot events then tell).
_RESTART_WAIT_S = 0.5

Run = namedtuple("Run", "producer session first_seq count")
Run.__doc__ = "Examples first_seq .. first_seq + count - 1 of producer session `session`."

Field = namedtuple("Field", "name dtype shape max_len", defaults=(None,))
Field.__doc__ = """One field of the schema: shape is one example's, with None for a variable
leading dimension (tokens:int32[?<=8192] is Field("tokens", "int32", (None,), 8192)); max_len
is that dimension's bound (None: none, or a fixed field)."""


class Ragged:
    """A variable-length field of a batch (docs/schema.md): every example's value concatenated
    in `values` (shape (rows of all examples, the field's dims after the first)) and `offsets`
    (int64, count + 1 entries, offsets[0] == 0): example i is values[offsets[i]:offsets[i+1]].
    Both are zero-copy views of the received batch (read-only in the broker's shared memory),
    numpy arrays, or torch tensors from stoker.torch.tensors. len() is the examples; r[i] is
    example i's value (a view); lengths() every example's length in rows."""

    __slots__ = ("values", "offsets")

    def __init__(self, values, offsets):
        self.values = values
        self.offsets = offsets

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, i):
        n = len(self)
        if not -n <= i < n:
            raise IndexError("example %d of %d" % (i, n))
        i %= n
        return self.values[int(self.offsets[i]):int(self.offsets[i + 1])]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def lengths(self):
        """Every example's length in rows (an array of count entries)."""
        if isinstance(self.offsets, memoryview):  # without numpy: a list
            return [self.offsets[i + 1] - self.offsets[i] for i in range(len(self))]
        return self.offsets[1:] - self.offsets[:-1]

    def pad(self, pad_value=0, multiple_of=None, width=None, mask=False):
        """(padded, lengths), or (padded, attention mask) with mask=True: stoker.ragged.pad."""
        from . import ragged
        return ragged.pad(self, pad_value, multiple_of, width, mask)

    def pack(self, row=None, whole=False, rows=None, pad_value=0):
        """input_ids, position_ids, cu_seqlens, max_seqlen: stoker.ragged.pack (row=L: rows of
        L, the layout of a Client(pack=L) batch)."""
        from . import ragged
        return ragged.pack(self, row=row, whole=whole, rows=rows, pad_value=pad_value)

    def nested(self):
        """A torch.nested tensor of the examples: stoker.ragged.nested."""
        from . import ragged
        return ragged.nested(self)

    def __repr__(self):
        return "Ragged(%d examples, %d rows)" % (len(self), int(self.offsets[-1]))


def _group_args(group, rank, world_size):
    """(group, rank, world_size) checked; rank and world size from torchrun's environment
    (RANK, WORLD_SIZE) when not given."""
    if group is None:
        if rank is not None or world_size is not None:
            raise ValueError("rank and world_size go with a group name (group=...)")
        return None, None, None
    if not group:
        raise ValueError("group: give a non-empty name")
    values = []
    for arg, value, env in (("rank", rank, "RANK"), ("world_size", world_size, "WORLD_SIZE")):
        if value is None:
            text = os.environ.get(env)
            if text is None:
                raise ValueError("group %r: no %s given and %s is not set (torchrun sets it)"
                                 % (group, arg, env))
            try:
                value = int(text)
            except ValueError:
                raise ValueError("group %r: %s=%r is not a number" % (group, env, text)) from None
        values.append(int(value))
    rank, world_size = values
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError("group %r: rank %d is outside the world size %d (ranks are 0..%d)"
                         % (group, rank, world_size, world_size - 1))
    return str(group), rank, world_size


def _job_args(job):
    """job checked: None (the default job) or a name of 1..63 bytes (STOKER_NAME_MAX - 1)."""
    if job is None:
        return None
    if not isinstance(job, str):
        raise ValueError("job=%r: give the job's name as a string (docs/sharing.md)" % (job,))
    n = len(job.encode())
    if not 1 <= n <= _lib.NAME_MAX - 1 or "\0" in job:
        raise ValueError("job=%r is %d bytes: a job's name is 1..%d bytes without NUL "
                         "(job=None: the default job)" % (job, n, _lib.NAME_MAX - 1))
    return job


def _batching_args(max_tokens, buckets, pack, split):
    """Client's batching arguments, checked: (max_tokens, buckets, pack, split)."""
    for name, v in (("max_tokens", max_tokens), ("pack", pack)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1
                              or v >= 1 << 32):
            raise ValueError("%s=%r: give a whole number of tokens, 1 or more" % (name, v))
    if pack is not None and max_tokens is not None:
        raise ValueError("pack=%d with max_tokens=%d: a packed batch's budget is its rows "
                         "(batch_size) x pack; give one of them" % (pack, max_tokens))
    if pack is not None and buckets:
        raise ValueError("buckets=True with pack=%d: packed rows have no padding to save; give "
                         "one of them" % pack)
    if pack is None and not split:
        raise ValueError("split=False says how pack= rows are filled; give pack= too")
    return max_tokens, bool(buckets), pack, bool(split)


def _mix_args(mix, mix_stop):
    """Client's mixture, checked: (the sources' names in order, the spec string for libstoker,
    the stop rule). mix: {pool: weight} (in its order) or "pool=weight,..."."""
    if mix is None:
        if mix_stop is not None:
            raise ValueError("mix_stop=%r without mix= (the pools and their weights)" % (mix_stop,))
        return None, None, None
    if isinstance(mix, str):
        pairs = []
        for part in mix.split(","):
            name, eq, weight = part.partition("=")
            if not eq:
                raise ValueError("mix=%r: %r is not pool=weight (e.g. code=0.3,web=0.7)"
                                 % (mix, part))
            pairs.append((name, weight))
    elif isinstance(mix, dict):
        pairs = list(mix.items())
    else:
        raise ValueError("mix=%r: give {pool: weight} or 'pool=weight,...'" % (mix,))
    if not pairs:
        raise ValueError("mix=%r names no source" % (mix,))
    names = []
    for name, weight in pairs:
        try:
            w = float(weight)
        except (TypeError, ValueError):
            raise ValueError("mix: weight %r of pool %r is not a number" % (weight, name))
        if not (w > 0 and w != float("inf")):
            raise ValueError("mix: pool %r has weight %r; weights are positive numbers"
                             % (name, weight))
        if not isinstance(name, str) or not name or "," in name or "=" in name:
            raise ValueError("mix: %r is not a pool name" % (name,))
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError("mix: a pool named twice in %r" % (mix,))
    if mix_stop not in (None, "first", "all"):
        raise ValueError("mix_stop=%r: 'first' (the supply ends with the first source that runs "
                         "dry) or 'all' (the others go on, re-weighted)" % (mix_stop,))
    spec = ",".join("%s=%r" % (n, float(w)) for n, w in pairs)
    return names, spec, mix_stop or "first"


def _schedule_args(names, schedule, blend):
    """Client's mix_schedule and mix_blend, checked: (libstoker's schedule string, blend)."""
    if schedule is None:
        if blend is not None:
            raise ValueError("mix_blend=%r without mix_schedule=" % (blend,))
        return None, None
    if names is None:
        raise ValueError("mix_schedule= without mix= (the pools and their first weights)")
    if blend not in (None, "step", "linear"):
        raise ValueError("mix_blend=%r: 'step' (a point's weights hold until the next) or "
                         "'linear' (blended from point to point)" % (blend,))
    points, last = [], 0
    for point in schedule:
        try:
            step, weights = point
            step = int(step)
        except (TypeError, ValueError):
            raise ValueError("mix_schedule: %r is not (step, {pool: weight})" % (point,))
        if step <= last:
            raise ValueError("mix_schedule: steps start at 1 and increase (%d after %d)"
                             % (step, last))
        last = step
        if not isinstance(weights, dict) or sorted(weights) != sorted(names):
            raise ValueError("mix_schedule: the point at step %d names %r; each point names every "
                             "pool of the mixture (%s)" % (step, weights, ", ".join(names)))
        for pool, w in weights.items():
            w = float(w)
            if not (w >= 0 and w != float("inf")):
                raise ValueError("mix_schedule: at step %d pool %r has weight %r; weights are "
                                 "numbers >= 0" % (step, pool, w))
        if sum(float(w) for w in weights.values()) <= 0:
            raise ValueError("mix_schedule: at step %d every weight is 0" % step)
        points.append("%d:%s" % (step, ",".join("%s=%r" % (n, float(weights[n])) for n in names)))
    return ";".join(points), blend or "step"


# Pulls in flight for a consumer with length buckets when prefetch= is not given (Client).
BUCKETS_PREFETCH = 8


def _weights_at(names, first, points, blend, step):
    """The weights (as shares when blended) for batch number step of a mixture whose first
    weights are first and whose schedule is points [(step, {pool: weight})]: libstoker's rule
    (stoker_mix_weights_at)."""
    k = sum(1 for at, _ in points if at <= step)
    w0, at0 = (first, 0) if k == 0 else (points[k - 1][1], points[k - 1][0])
    if blend != "linear" or k == len(points):
        return {n: float(w0[n]) for n in names}
    at1, w1 = points[k]
    t = (step - at0) / (at1 - at0)
    s0, s1 = sum(float(w0[n]) for n in names), sum(float(w1[n]) for n in names)
    return {n: (1 - t) * float(w0[n]) / s0 + t * float(w1[n]) / s1 for n in names}


def _schedule_after(names, first, points, blend, done):
    """The schedule as a consumer resumed after done batches sees it: its batch 1 is the
    original's done + 1, with the weights the original gives there (a blend goes on from them to
    its next point), and every later point moved down by done."""
    here = _weights_at(names, first, points, blend, done + 1)
    return [(1, here)] + [(at - done, w) for at, w in points if at > done + 1]


def _tls_args(url, tls_ca, tls_cert, tls_key, tls_insecure):
    """The TLS settings checked against url, with paths as strings (os.fspath): a tls+tcp:// URL
    verifies the broker against tls_ca unless tls_insecure; other URLs take none."""
    paths = {}
    for arg, value in (("tls_ca", tls_ca), ("tls_cert", tls_cert), ("tls_key", tls_key)):
        paths[arg] = os.fspath(value) if value is not None else None
    tls_insecure = bool(tls_insecure)
    if not str(url).startswith("tls+tcp://"):
        given = [a for a, v in paths.items() if v is not None] + (
            ["tls_insecure"] if tls_insecure else [])
        if given:
            raise ValueError("%s: TLS settings need a tls+tcp:// URL, not %r"
                             % (", ".join(given), url))
        return paths, False
    if paths["tls_ca"] is None and not tls_insecure:
        raise ValueError("%s: a tls+tcp:// broker is verified: give tls_ca=PATH, the CA "
                         "certificate (PEM) that signed the broker's certificate (or "
                         "tls_insecure=True to encrypt without verifying the broker, which anyone "
                         "in the middle can then pose as)" % url)
    if paths["tls_ca"] is not None and tls_insecure:
        raise ValueError("tls_insecure=True and tls_ca=%r contradict each other: give one"
                         % paths["tls_ca"])
    if (paths["tls_cert"] is None) != (paths["tls_key"] is None):
        raise ValueError("tls_cert and tls_key go together (the client certificate and its key)")
    for arg, path in paths.items():
        if path is not None:
            try:
                with open(path, "rb"):
                    pass
            except OSError as e:
                raise ValueError("%s=%r: %s" % (arg, path, e.strerror or e)) from None
    return paths, tls_insecure


def _set_tls(o, cstr, paths, insecure):
    """Fills the TLS fields of the Options o (cstr keeps the bytes alive)."""
    o.tls_ca = cstr(paths["tls_ca"])
    o.tls_cert = cstr(paths["tls_cert"])
    o.tls_key = cstr(paths["tls_key"])
    o.tls_insecure = 1 if insecure else 0


def _raise(code, reason):
    if code in (_lib.NO_PRODUCERS, _lib.END_OF_DATA):
        raise SupplyEnded(code, reason)
    if code == _lib.STALLED:
        raise Stalled(code, reason)
    if code == _lib.GROUP_BROKEN:
        raise GroupBroken(code, reason)
    if code == _lib.TLS:
        raise TLSError(code, reason)
    raise StokerError(code, reason)


class _Memory:
    """Owns one C batch; frees it when the last view of it is gone."""

    __slots__ = ("ptr", "lib", "owned", "__weakref__")

    def __init__(self, lib, ptr, owned=True):
        self.lib = lib
        self.ptr = ptr
        self.owned = owned  # False until the caller holds it (Client.next_batch)

    def __del__(self):
        if getattr(self, "ptr", None) and getattr(self, "owned", False):
            try:
                self.lib.stoker_consumer_batch_free(self.ptr)
            except Exception:  # interpreter shutdown
                pass
            self.ptr = None


_buffer_types = {}


def _view(memory, address, nbytes):
    """A ctypes byte array over address..address+nbytes that keeps memory alive."""
    t = _buffer_types.get(nbytes)
    if t is None:
        t = type("StokerBuffer%d" % nbytes, (ctypes.c_ubyte * nbytes,), {})
        if len(_buffer_types) < 1024:
            _buffer_types[nbytes] = t
    buf = t.from_address(address)
    buf._stoker_memory = memory
    return buf


_BFLOAT16 = 10  # STOKER_BFLOAT16
_torch = None


def _bfloat16(arr):
    """A bfloat16 field's uint16 array as a torch.bfloat16 tensor over the same memory when torch
    is installed (imported only when a schema has such a field), else the uint16 array as is."""
    global _torch
    if _torch is None:
        try:
            import torch
            _torch = torch
        except ImportError:
            _torch = False
    if _torch is False or _np is None:
        return arr
    import warnings
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not writable", category=UserWarning)
        return _torch.from_numpy(arr.view(_np.int16)).view(_torch.bfloat16)


class Batch(dict):
    """One batch: a dict from field name to an array of shape (examples, field shape...), a
    numpy array when numpy is installed, else a memoryview (a bfloat16 field: a torch.bfloat16
    tensor when torch is installed, else its raw uint16 patterns; a variable-length field: a
    stoker.Ragged of values and offsets; docs/schema.md). Attributes: count (examples), runs
    (list of Run), lease state. identities() gives each example's (session, seq).
    Release it (or let Client.batches do it) when you have trained on it."""

    def __init__(self, client, memory):
        super().__init__()
        lib = client._lib
        self._client = client
        self._memory = memory
        self._released = False
        ptr = memory.ptr
        self.count = lib.stoker_consumer_batch_count(ptr)
        # In the broker's shared memory (mapped read-only): arrays are views marked read-only.
        self.shared = bool(lib.stoker_consumer_batch_shared(ptr))
        data = ctypes.c_void_p()
        dtype = ctypes.c_int()
        rank = ctypes.c_uint32()
        shape = (ctypes.c_uint32 * (_lib.MAX_RANK + 1))()
        count = ctypes.c_uint64()
        nbytes = ctypes.c_uint64()
        offsets = ctypes.c_void_p()
        n_offsets = ctypes.c_uint64()
        for i, name in enumerate(client._field_names):
            lib.stoker_consumer_batch_field(ptr, i, ctypes.byref(data), ctypes.byref(dtype),
                                            ctypes.byref(rank), shape, ctypes.byref(count),
                                            ctypes.byref(nbytes))
            ragged = lib.stoker_consumer_batch_offsets(ptr, i, ctypes.byref(offsets),
                                                       ctypes.byref(n_offsets)) == 0
            dims = tuple(shape[k] for k in range(rank.value))
            _, npdtype, fmt = _lib.DTYPES[dtype.value]
            if nbytes.value == 0 or not data.value:
                arr = _np.zeros(dims, dtype=npdtype) if _np is not None else memoryview(b"")
            else:
                buf = _view(memory, data.value, nbytes.value)
                if _np is not None:
                    arr = _np.frombuffer(buf, dtype=npdtype).reshape(dims)
                    if self.shared:
                        arr.flags.writeable = False
                else:
                    arr = memoryview(buf).cast("B").cast(fmt, dims)
            if dtype.value == _BFLOAT16:
                arr = _bfloat16(arr)
            if ragged:  # values above, and the offsets (uint64 below 2^63) viewed as int64
                obuf = _view(memory, offsets.value, n_offsets.value * 8)
                if _np is not None:
                    offs = _np.frombuffer(obuf, dtype="<i8")
                    if self.shared:
                        offs.flags.writeable = False
                else:
                    offs = memoryview(obuf).cast("B").cast("q")
                arr = Ragged(arr, offs)
            self[name] = arr
        self._runs = None

    @property
    def runs(self):
        """The batch's runs (list of Run): each a producer's consecutive examples, in example
        order. Read on first use: a batch of sequences chosen by length (buckets) has one run per
        example, and reading them for every batch cost a loop that never looks at them a tenth
        of its time."""
        if self._runs is None:
            lib, ptr, runs = self._client._lib, self._memory.ptr, []
            producer, n = ctypes.c_uint32(), ctypes.c_uint32()
            session, first = ctypes.c_uint64(), ctypes.c_uint64()
            for r in range(lib.stoker_consumer_batch_n_runs(ptr)):
                lib.stoker_consumer_batch_run(ptr, r, ctypes.byref(producer),
                                              ctypes.byref(session), ctypes.byref(first),
                                              ctypes.byref(n))
                runs.append(Run(producer.value, session.value, first.value, n.value))
            self._runs = runs
        return self._runs

    def identities(self):
        """Every example's identity, in example order: (sessions, seqs) as two uint64 numpy
        arrays, or a list of (session, seq) pairs without numpy."""
        n = self.count
        sessions = (ctypes.c_uint64 * n)()
        seqs = (ctypes.c_uint64 * n)()
        got = self._client._lib.stoker_consumer_batch_identities(self._memory.ptr, sessions,
                                                                 seqs, n)
        if _np is not None:
            return (_np.frombuffer(sessions, dtype=_np.uint64)[:got].copy(),
                    _np.frombuffer(seqs, dtype=_np.uint64)[:got].copy())
        return list(zip(sessions[:got], seqs[:got]))

    def sources(self):
        """A mixture's batch (Client(mix=...)): every example's source, the pool's name, in
        example order (a list); None for an example of no mixture."""
        n = self.count
        out = (ctypes.c_uint32 * n)()
        got = self._client._lib.stoker_consumer_batch_sources(self._memory.ptr, out, n)
        names = self._client.mix or []
        return [names[k] if k < len(names) else None for k in out[:got]]

    def epoch_indices(self):
        """A dataset's batch: every example's (epoch, index), in example order, as two numpy
        arrays (uint32, uint64), or a list of pairs without numpy; empty for streams."""
        n = self.count
        epochs = (ctypes.c_uint32 * n)()
        indices = (ctypes.c_uint64 * n)()
        got = self._client._lib.stoker_consumer_batch_items(self._memory.ptr, epochs, indices, n)
        if _np is not None:
            return (_np.frombuffer(epochs, dtype=_np.uint32)[:got].copy(),
                    _np.frombuffer(indices, dtype=_np.uint64)[:got].copy())
        return list(zip(epochs[:got], indices[:got]))

    @property
    def released(self):
        return self._released

    def release(self):
        """Acknowledges the batch (the broker frees its examples; sent with the next pull or at
        close). Idempotent. The arrays stay readable as long as you hold them."""
        if self._released:
            return
        self._released = True
        client = self._client
        if client._handle is not None:
            client._lib.stoker_consumer_ack(client._handle, self._memory.ptr)
        if client._held is self:
            client._held = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.release()
        return False

    def __repr__(self):
        shapes = ", ".join("%s: %s" % (k, tuple(getattr(v, "shape", ()))) for k, v in self.items())
        return "<stoker.Batch %d examples {%s}%s>" % (self.count, shapes,
                                                      " released" if self._released else "")

    # A Batch compares and hashes as an object, not as a dict of arrays.
    __eq__ = object.__eq__
    __hash__ = object.__hash__


class Client:
    """A consumer of a stoker broker.

    Client(url, token_file=None, prefetch=None, stall_timeout=None) connects on first use (the
    batch size is fixed then; it is the first batches()/next_batch() argument, or batch_size
    here). prefetch and stall_timeout (seconds) default to libstoker's (4 and 4.0; prefetch 8
    with buckets=True).
    Events (producers joining, lost, finishing) go to on_event(Event) as soon as a pull brings
    them, from the thread that pulls; without on_event they are kept for events().
    Variable-length data (docs/schema.md, "Batching by tokens"), batches made by the broker by tokens (the
    rows of the schema's first variable field): max_tokens=T gives as many sequences as fit in T
    padded tokens (batch_size then caps their count; unset: no cap); buckets=True batches of
    similar length (little padding); pack=L batch_size rows of L tokens (4 unset) filled with
    whole sequences: lay them out with batch[field].pack(row=L) (split=False: no sequence split
    across rows). A sequence longer than the budget comes alone, never dropped.
    Mixing sources (docs/mixing.md): mix={"code": 0.3, "web": 0.7} makes every batch of the
    pools of producers (their --pool) in these proportions, exactly: each pool's running count
    stays within one example of its weight x the examples delivered; batch.sources() names each
    example's pool. mix_stop: when a pool runs dry, "first" (default: the supply ends) or "all"
    (the others go on, re-weighted, until every pool ran dry). mix_schedule=[(1000, {"code": 0.5,
    "web": 0.5}), ...]: from batch 1000 on (a group's global step) those weights; mix_blend
    "step" (default) or "linear" (blended from point to point). Shares stay exact throughout.
    Jobs (docs/sharing.md): job="NAME" (1..63 bytes) names the training job this client belongs
    to; jobs share the broker's producers and each gets every example once. None (default): the
    default job. Every rank of a group names the same job; state_dict() keeps it and
    load_state_dict() refuses another job's state.
    Data parallelism: with group="NAME" the client is one rank of a group (docs/groups.md):
    rank and world_size default to torchrun's RANK and WORLD_SIZE environment variables. Every
    rank gets batches of the same size, the same number of them, and SupplyEnded at the same
    step (its leftover attribute: the examples too few to give every rank one more); a rank lost
    before the end raises GroupBroken on the others.
    TLS: a tls+tcp:// URL needs tls_ca (the CA certificate, PEM, that signed the broker's;
    the broker is always verified unless tls_insecure=True), and tls_cert with tls_key (this
    client's certificate and unencrypted key, PEM) when the broker requires client certificates:
    the C clients' --tls-ca, --tls-cert, --tls-key and --tls-insecure (docs/security.md). A TLS
    failure (wrong CA, a refused or missing client certificate, TLS on one end only) raises
    TLSError naming it, within about a second; bad TLS arguments raise ValueError at once.
    Use it from one thread. As a context manager, leaving the block closes it; a batch still
    held then is acknowledged unless the block ended with an exception (then the broker
    redelivers it to another consumer). See batches() for when a loop's batches are
    acknowledged.
    """

    def __init__(self, url, token_file=None, prefetch=None, stall_timeout=None, *, batch_size=None,
                 token=None, name=None, connect_timeout=None, on_event=None, group=None,
                 rank=None, world_size=None, commit=False, tls_ca=None, tls_cert=None,
                 tls_key=None, tls_insecure=False, max_tokens=None, buckets=False, pack=None,
                 split=True, mix=None, mix_stop=None, mix_schedule=None, mix_blend=None,
                 job=None):
        self.group, self.rank, self.world_size = _group_args(group, rank, world_size)
        self.job = _job_args(job)
        self.mix, self._mix_spec, self.mix_stop = _mix_args(mix, mix_stop)
        self._mix_schedule, self.mix_blend = _schedule_args(self.mix, mix_schedule, mix_blend)
        self._mix_points = list(mix_schedule) if mix_schedule is not None else None
        # The schedule's position: batches handed to the caller, and before them a resumed
        # consumer's checkpoint's (state_dict()["mix"]["step"]); a schedule set_mix ended.
        self._mix_taken = self._mix_done = 0
        self._mix_schedule_over = False
        self._mix_now = dict(mix) if isinstance(mix, dict) else (
            {n: float(w) for n, w in (p.split("=") for p in mix.split(","))} if mix else None)
        self.max_tokens, self.buckets, self.pack, self.split = _batching_args(
            max_tokens, buckets, pack, split)
        self._tls, self.tls_insecure = _tls_args(url, tls_ca, tls_cert, tls_key, tls_insecure)
        self._lib = _lib.load()
        self.url = url
        self.token_file = os.fspath(token_file) if token_file is not None else None
        self.token = token
        lib_defaults = _lib.defaults()
        # With buckets the broker's answer takes longer (a run chosen among a reserve, one part
        # per sequence): 4 pulls in flight left a fast loop waiting on it (tokens/s 0.86 of
        # count batching's from a free producer at batch_size=32; 0.95 with 8).
        self.prefetch = (int(prefetch) if prefetch is not None
                         else BUCKETS_PREFETCH if self.buckets else lib_defaults.prefetch)
        self.stall_timeout = (float(stall_timeout) if stall_timeout is not None
                              else lib_defaults.stall_timeout_ms / 1000.0)
        self.connect_timeout = connect_timeout
        self.name = name
        self.on_event = on_event
        self.commit_mode = bool(commit)
        self._commits = 0
        self._resume = None  # a group rank's load_state_dict() dict, for _open
        self.batch_size = None
        self.leftover = None  # a rank's, once the supply ended (see SupplyEnded.leftover)
        self._handle = None
        self._held = None  # the last batch batches() yielded, until the next is requested
        self._stashed = None  # epochs(): a batch that came with an epoch's end, for the next
        # The library writes each batch it hands out here; next_batch takes it from here only
        # once the Batch the caller gets is made. A KeyboardInterrupt (raised at the first Python
        # instruction after a call into the library) leaves it here, and the next next_batch
        # returns it: Ctrl-C caught around next_batch loses no batch.
        self._out = ctypes.c_void_p()
        # epochs(): when the broker started, on time.monotonic() (None: not followed), whether a
        # sign of a restart came (snapshot events), the restart noticed and not yet raised, and
        # the epoch ends counted before it (the new broker's epochs count from there).
        self._broker_start = None
        self._restart_sign = False
        self._restarted = None
        self._epochs_base = 0
        self._restarts_seen = 0  # the library's count of restarts (broker_restarts) followed
        self._blocks = 0  # open `with` blocks that decide about _held when they end
        self._duplicates = 0  # duplicates() as it was at close()
        self._delivery = None  # delivery as it was at close()
        self._events = []
        self._field_names = []
        self.fields = []
        self.schema = None
        if batch_size is not None:
            self._open(batch_size)

    # -- connection ---------------------------------------------------------------------------

    def _open(self, batch_size):
        if self._handle is not None:
            if self.batch_size is None and batch_size is not None:
                self.batch_size = int(batch_size)  # a Ctrl-C came before the client noted it
            if batch_size is not None and int(batch_size) != self.batch_size:
                raise ValueError("this client pulls batches of %d (fixed when it connected); "
                                 "use another Client for batches of %d"
                                 % (self.batch_size, batch_size))
            if self.schema is None:
                self._describe()  # a Ctrl-C came between the connection and its description
            return
        if batch_size is None and not (self.max_tokens or self.pack):
            raise ValueError("give a batch size (batches(batch_size))")
        lib = self._lib
        o = _lib.Options()
        lib.stoker_consumer_options_init(ctypes.byref(o))
        keep = []  # the byte strings the options point to, alive during the call

        def cstr(s):
            if s is None:
                return None
            b = s.encode() if isinstance(s, str) else bytes(s)
            keep.append(b)
            return b

        o.url = cstr(self.url)
        o.token = cstr(self.token)
        o.token_file = cstr(self.token_file)
        o.name = cstr(self.name)
        o.batch_size = int(batch_size or 0)  # by tokens: libstoker's default (no cap; 4 rows)
        o.max_tokens = self.max_tokens or 0
        o.buckets = 1 if self.buckets else 0
        o.pack = self.pack or 0
        o.pack_whole = 1 if self.pack and not self.split else 0
        o.mix = cstr(self._mix_spec)
        o.mix_stop = cstr(self.mix_stop)
        o.mix_schedule = cstr(self._mix_schedule)
        o.mix_blend = cstr(self.mix_blend)
        o.job = cstr(self.job)
        o.prefetch = self.prefetch
        o.stall_timeout_ms = max(1, int(round(self.stall_timeout * 1000)))
        if self.connect_timeout is not None:
            o.connect_timeout_ms = max(1, int(round(self.connect_timeout * 1000)))
        _set_tls(o, cstr, self._tls, self.tls_insecure)
        handle = ctypes.c_void_p()
        err = ctypes.create_string_buffer(512)
        resume_step = 0
        if self._resume is not None:
            kept = self._resume.get("batch_size")
            if kept is not None and int(kept) != int(batch_size):
                raise ValueError(
                    "this checkpoint was taken with batches of %d per rank (world %s); this run "
                    "asks for %d: a resumed group keeps the batch size per rank (docs/groups.md)"
                    % (kept, self._resume.get("world_size"), batch_size))
            resume_step = int(self._resume.get("group_step", 0))
        try:
            self._connect(o, cstr, handle, err, resume_step, batch_size)
        except BaseException:
            # A Ctrl-C after the library opened the connection and before this client took it:
            # it takes it now (the next call describes it), so nothing is left behind (a group's
            # rank would otherwise be held by this very process when it says hello again).
            if handle.value and self._handle is None:
                self._handle = handle.value
                self.batch_size = int(batch_size) if batch_size is not None else None
                if self.commit_mode and self.group is None:
                    lib.stoker_consumer_set_commit(self._handle, 1)
            raise
        self._describe()

    def _connect(self, o, cstr, handle, err, resume_step, batch_size):
        lib = self._lib
        if self.group is None:
            rv = lib.stoker_consumer_open(ctypes.byref(o), ctypes.byref(handle), err, len(err))
        elif self.commit_mode or resume_step:
            rv = lib.stoker_consumer_open_group_at(ctypes.byref(o), cstr(self.group), self.rank,
                                                   self.world_size, resume_step,
                                                   1 if self.commit_mode else 0,
                                                   ctypes.byref(handle), err, len(err))
        else:
            rv = lib.stoker_consumer_open_group(ctypes.byref(o), cstr(self.group), self.rank,
                                                self.world_size, ctypes.byref(handle), err,
                                                len(err))
        if rv != _lib.OK:
            _raise(rv, "cannot connect to %s: %s" % (self.url, err.value.decode(errors="replace")))
        # The batch size before the handle: a Ctrl-C between the two leaves a handle that _open
        # (the next call, or its except clause) completes, never a handle without its size.
        self.batch_size = int(batch_size) if batch_size is not None else None
        self._handle = handle.value
        if self.commit_mode and self.group is None:
            lib.stoker_consumer_set_commit(self._handle, 1)

    def _describe(self):
        """The connected broker's schema and fields, read into this client (all at once)."""
        lib = self._lib
        spec = ctypes.create_string_buffer(4096)
        lib.stoker_consumer_schema(self._handle, spec, len(spec))
        fields, names = [], []
        shape = (ctypes.c_uint32 * _lib.MAX_RANK)()
        for i in range(lib.stoker_consumer_n_fields(self._handle)):
            name = lib.stoker_consumer_field_name(self._handle, i).decode()
            dtype = _lib.DTYPES[lib.stoker_consumer_field_dtype(self._handle, i)][0]
            rank = lib.stoker_consumer_field_shape(self._handle, i, shape, _lib.MAX_RANK)
            bound = ctypes.c_uint32()
            var = lib.stoker_consumer_field_variable(self._handle, i, ctypes.byref(bound)) == 1
            dims = tuple(None if var and k == 0 else shape[k] for k in range(rank))
            fields.append(Field(name, dtype, dims, (bound.value or None) if var else None))
            names.append(name)
        self.fields, self._field_names, self.schema = fields, names, spec.value.decode()

    # -- mixing ---------------------------------------------------------------------------------

    def set_mix(self, weights):
        """New weights for this client's mixture ({pool: weight}, the same pools as mix=): they
        apply from the broker's next batch on, whose number (1 for the first batch this client
        got) is returned; batches already pulled ahead keep the weights they were made with, and
        a schedule is done. Not for a rank of a group: its group changes by mix_schedule, at one
        step for every rank. Raises ValueError for other pools, StokerError when refused."""
        if self.mix is None:
            raise ValueError("set_mix: this client has no mixture (give mix= when creating it)")
        if not isinstance(weights, dict) or sorted(weights) != sorted(self.mix):
            raise ValueError("set_mix(%r): name each pool of the mixture (%s)"
                             % (weights, ", ".join(self.mix)))
        _, spec, _ = _mix_args({n: weights[n] for n in self.mix}, None)
        if self._handle is None:
            raise ValueError("set_mix: the client is not connected yet (take a batch first)")
        start = ctypes.c_uint64()
        rv = self._lib.stoker_consumer_set_mix(self._handle, spec.encode(), ctypes.byref(start))
        if rv != _lib.OK:
            _raise(rv, "set_mix: %s" % self._lib.stoker_consumer_error(self._handle).decode(
                errors="replace"))
        self._mix_now = {n: weights[n] for n in self.mix}
        self._mix_schedule_over = True
        return start.value

    # -- commit with checkpoints --------------------------------------------------------------

    def commit(self):
        """With commit=True: acknowledges, now, every batch released since the last commit (and
        the one batches() holds), so they count as trained; until then the broker keeps them and
        redelivers them if this process dies. Raises StokerError when the broker did not confirm
        (they stay uncommitted). Returns how many batches were committed."""
        if self._handle is None:
            return 0
        if self._held is not None:
            self._held.release()
            self._held = None
        n = self._lib.stoker_consumer_uncommitted(self._handle)
        rv = self._lib.stoker_consumer_commit(self._handle)
        if rv != _lib.OK:
            _raise(rv, "commit: %s" % self._lib.stoker_consumer_error(self._handle).decode(
                errors="replace"))
        self._commits += 1
        return n

    @property
    def group_step(self):
        """A rank's steps taken so far (counted on from the checkpoint's when resumed); None
        outside a group."""
        if self.group is None:
            return None
        if self._handle is None:
            return int((self._resume or {}).get("group_step", 0))
        return int(self._lib.stoker_consumer_group_steps(self._handle))

    def state_dict(self):
        """The torchdata StatefulDataLoader protocol: call it when you save a checkpoint. It
        commits (see commit()) and returns a small dict to save with the model. A process that
        resumes from that checkpoint gets, from the broker, exactly what was not committed.

        A rank of a group (group=, commit=True) commits with the others: every rank calls
        state_dict() at the same step (rank 0 may be the only one that saves it); the call
        returns once every rank's commit is in and applied, and raises when a rank did not
        commit within a minute or was lost (then nothing of that commit counts). The dict
        names the group's position: its step, the world size and the batch size per rank (a
        resumed group keeps the batch size per rank; the world size may change), and how many
        epochs of a dataset had ended."""
        committed = self.commit() if self.commit_mode else 0
        state = {"stoker": 1, "url": self.url, "commits": self._commits,
                 "committed_batches": int(committed)}
        if self.group is not None:
            state.update({"group": self.group, "group_step": self.group_step,
                          "world_size": self.world_size, "rank": self.rank,
                          "batch_size": self.batch_size if self.batch_size is not None
                          else (self._resume or {}).get("batch_size")})
        if self._handle is not None:
            state["epochs_ended"] = int(self._lib.stoker_consumer_epochs_ended(self._handle))
        if self.mix is not None:
            # The mixture as it stands (set_mix included): a resumed consumer may take it or
            # other weights; each source's uncommitted examples come to it once either way.
            # Its schedule's position: the batches trained under it, this process's and the
            # checkpoint's it resumed from (a group's is its group_step).
            over = self._mix_schedule_over
            state["mix"] = {"weights": dict(self._mix_now), "stop": self.mix_stop,
                            "schedule": None if over else self._mix_points,
                            "blend": None if over else self.mix_blend,
                            "step": self.group_step if self.group is not None
                            else self._mix_done + self._mix_taken}
        if self.job is not None:
            state["job"] = self.job
        return state

    def load_state_dict(self, state):
        """Resumes from state_dict()'s dict. The position lives in the broker (what was not
        committed is delivered again), so for a plain consumer this only checks the dict and
        continues the count. A rank of a group calls it before its first batch: the group's
        step count goes on from the checkpoint's, at this run's world size (which may differ
        from the checkpoint's); the batch size per rank must be the checkpoint's."""
        if not isinstance(state, dict) or state.get("stoker") != 1:
            raise ValueError("not a stoker state_dict: %r" % (state,))
        # A job's position lives in the broker under its name: another job's checkpoint would
        # resume nothing of this one (a state without "job" is the default job's).
        if state.get("job") != self.job:
            def said(job):
                return "the default job" if job is None else "job %r" % (job,)
            raise ValueError("this state_dict is of %s; this client is of %s (docs/sharing.md)"
                             % (said(state.get("job")), said(self.job)))
        done = int((state.get("mix") or {}).get("step", 0))
        if self.group is None and self.mix is not None:
            self._mix_done = done
        if self.group is None and self._mix_points and done > 0:
            # A plain consumer's schedule goes on from the checkpoint's batch (a group's from
            # its group_step, kept by the broker): this run's batch 1 is its batch done + 1.
            if self._handle is not None:
                raise ValueError("load_state_dict() of a consumer with mix_schedule= comes "
                                 "before its first batch: the schedule's position is set when "
                                 "it connects")
            points = _schedule_after(self.mix, self._mix_now, self._mix_points, self.mix_blend,
                                     done)
            self._mix_schedule, _ = _schedule_args(self.mix, points, self.mix_blend)
        if self.group is not None and "group_step" in state:
            if self._handle is not None:
                raise ValueError("load_state_dict() of a group's rank comes before its first "
                                 "batch (and without batch_size= to Client): the group's step "
                                 "count is set when the rank joins")
            self._resume = dict(state)
        self._commits = int(state.get("commits", 0))

    def close(self, acknowledge_held=True):
        """Sends pending acknowledgements and disconnects. Batches already pulled stay readable.
        Idempotent."""
        if self._handle is None:
            return
        if self._held is not None and acknowledge_held:
            self._held.release()
        self._held = None
        self._stashed = None  # never seen by the caller: not acknowledged, redelivered
        if self._out.value:  # handed out, never returned (interrupted): redelivered too
            self._lib.stoker_consumer_batch_free(self._out.value)
            self._out.value = None
        self._duplicates = self._lib.stoker_consumer_duplicates(self._handle)
        self._delivery = self.delivery
        self._lib.stoker_consumer_close(self._handle)
        self._handle = None

    def __enter__(self):
        self._blocks += 1
        return self

    def __exit__(self, exc_type, exc, tb):
        self._blocks -= 1
        self.close(acknowledge_held=exc_type is None)
        return False

    def __del__(self):
        try:
            self.close(acknowledge_held=False)
        except Exception:
            pass

    # -- batches ------------------------------------------------------------------------------

    def _dispatch_events(self):
        lib, h = self._lib, self._handle
        kind, producer, at = ctypes.c_int(), ctypes.c_uint32(), ctypes.c_double()
        name = ctypes.create_string_buffer(64)
        reason = ctypes.create_string_buffer(160)
        while lib.stoker_consumer_poll_event(h, ctypes.byref(kind), ctypes.byref(producer), name,
                                             len(name), ctypes.byref(at), reason, len(reason)):
            e = Event(_lib.EVENT_KINDS.get(kind.value, str(kind.value)), producer.value,
                      name.value.decode(errors="replace"), at.value,
                      reason.value.decode(errors="replace"))
            if e.reason == _SNAPSHOT_REASON:
                self._restart_sign = True
            if e.kind == "broker_restarted":
                e = e._replace(name=self.url)  # the library's own event: named by the URL
            self._event(e)

    def _event(self, e):
        if self.on_event is not None:
            self.on_event(e)
        else:
            self._events.append(e)

    def events(self):
        """Events not yet returned (only when no on_event callback was given)."""
        out, self._events = self._events, []
        return out

    def next_batch(self, batch_size=None, _until=None):
        """Waits (at most the stall timeout) for the next batch and returns it; you own it and
        must release() it. Raises SupplyEnded, Stalled or StokerError."""
        # _until (Epoch's): a test made between slices of the wait; None is returned once it
        # holds (the epoch ended for this job while no batch was coming).
        self._open(batch_size if batch_size is not None else self.batch_size)
        out = self._out
        # Python runs its signal handlers (Ctrl-C's KeyboardInterrupt) only between calls into
        # the library, so the wait goes in slices of _SLICE_S and the stall timeout is counted
        # here: Ctrl-C ends a wait within a slice, whatever the broker does.
        started = time.monotonic()
        deadline = started + self.stall_timeout
        while True:
            if out.value:  # a batch an interrupted call got: the caller's now
                rv, reason = _lib.OK, ""
                self._dispatch_events()
                break
            left_ms = int((deadline - time.monotonic()) * 1000)
            wait_ms = max(1, min(int(_SLICE_S * 1000), left_ms))
            rv = self._lib.stoker_consumer_next_within(self._handle, ctypes.byref(out), wait_ms)
            reason = self._lib.stoker_consumer_error(self._handle).decode(errors="replace")
            self._dispatch_events()
            if rv != _lib.TIMEOUT:
                break
            if _until is not None and _until():
                return None
            if time.monotonic() >= deadline:
                # The broker's word on why, if it said (a group waiting for a full step).
                why = reason.split("(not stalled yet): ", 1)
                rv, reason = _lib.STALLED, "no batch within %.1f s%s" % (
                    self.stall_timeout, ": " + why[1] if len(why) == 2 else "")
                break
        if rv != _lib.OK:
            if self.group is not None and rv in (_lib.NO_PRODUCERS, _lib.END_OF_DATA):
                self.leftover = int(self._lib.stoker_consumer_group_leftover(self._handle))
            try:
                _raise(rv, reason)
            except SupplyEnded as e:
                e.leftover = self.leftover
                raise
        memory = _Memory(self._lib, out.value, owned=False)
        batch = Batch(self, memory)
        if self._broker_start is not None:
            self._look_for_restart(batch, time.monotonic() - started)
        # The hand-over: two stores and the return, with no call between them where Python
        # could raise a KeyboardInterrupt; before them an interrupt leaves the batch in _out.
        memory.owned = True
        out.value = None
        self._mix_taken += 1  # no call in these three lines: an interrupt comes before or after
        return batch

    def _broker_started(self):
        """When the broker started, on time.monotonic(): (earliest, latest), from its uptime and
        the round trip of the request that asked it."""
        sent = time.monotonic()
        st = self.status()
        answered = time.monotonic()
        up = float(st["uptime_s"])
        return (sent - up, answered - up), st

    def _broker_restarts(self):
        """The library's count of broker restarts (hellos answered by another instance), the
        instance that answered the latest (0: a broker that does not say one) and the epochs
        ended before the latest restart."""
        bid, before = ctypes.c_uint64(), ctypes.c_uint32()
        n = self._lib.stoker_consumer_broker_restarts(self._handle, ctypes.byref(bid),
                                                      ctypes.byref(before))
        return n, bid.value, before.value

    @property
    def broker_restarts(self):
        """Restarts of the broker this client noticed (a hello answered by another broker
        instance; each also a "broker_restarted" event before the new broker's first batch); 0
        before the first batch, or with a broker that does not say its instance."""
        return self._broker_restarts()[0] if self._handle is not None else self._restarts_seen

    def _look_for_restart(self, batch, waited_s):
        """epochs(): whether batch came from another broker than the one whose epochs are
        followed. The library tells exactly (its hello was answered by another broker instance,
        and it queued a "broker_restarted" event before the new broker's first batch); with a
        broker that does not say its instance, the broker's uptime is asked on a sign: the broker
        told this client who was there as to a trainer it did not know, the batch took long to
        come, or it holds an item of an epoch that ended here (a broker never sends one)."""
        n, instance, epochs_before = self._broker_restarts()
        if n != self._restarts_seen:
            self._restarts_seen = n
            self._restart_sign = False
            self._epochs_base = epochs_before
            try:
                start, _ = self._broker_started()
                now = time.monotonic()
                self._broker_start, uptime = start, now - start[0]
            except StokerError:
                uptime = None
            self._restarted = ("the broker at %s restarted (instance %016x answered): the new "
                               "one starts its epochs anew from epoch 0" % (self.url, instance),
                               uptime)
            return
        if instance != 0:
            return  # the same broker: it says its instance, so no restart went unnoticed
        first = _first_epoch(batch)
        ended = first >= 0 and first < self._epochs_ended()
        if not (self._restart_sign or ended or waited_s >= _RESTART_WAIT_S):
            return
        self._restart_sign = False
        try:
            start, _ = self._broker_started()
        except StokerError:
            if not ended:
                return  # the next sign asks again
            start = None
        # A broker that started after the latest moment the followed one can have started is
        # another one: the two spans of the round trips do not meet.
        now = time.monotonic()
        slack = _UPTIME_ROUNDING_S + _CLOCK_DRIFT * (now - self._broker_start[0])
        if start is not None and start[0] <= self._broker_start[1] + slack:
            return  # the same broker
        before = now - self._broker_start[0]
        uptime = now - start[0] if start is not None else None
        self._broker_start = start if start is not None else (now, now)
        self._epochs_base = self._lib.stoker_consumer_epochs_ended(self._handle)
        if uptime is None:
            reason = ("the broker at %s sent an item of epoch %d, which had ended: another "
                      "broker, which starts its epochs anew from epoch 0" % (self.url, first))
        else:
            reason = ("the broker at %s restarted (up for %.1f s, the one before would be up for "
                      "%.1f s): the new one starts its epochs anew from epoch 0"
                      % (self.url, uptime, before))
        self._restarted = (reason, uptime)
        self._event(Event("broker_restarted", 0, self.url, uptime or 0.0, reason))

    def batches(self, batch_size=None, max_batches=None):
        """Yields batches until the supply ends (SupplyEnded), nothing arrives within the stall
        timeout (Stalled), or max_batches were yielded.

        Acknowledgement: each batch is acknowledged when the loop asks for the next one. The
        batch you leave the loop with (break, return, the generator closed) is acknowledged too,
        unless an exception ends the Client's `with` block: then the broker redelivers it to
        another consumer. Python closes a loop's generator in the same way whether the loop was
        left by break or by an exception, so only a `with` block can tell the two apart: inside
        one, the block's end decides (normally: acknowledged; by an exception: given back);
        without one, leaving the loop acknowledges. A killed process acknowledges nothing."""
        n = 0
        try:
            while max_batches is None or n < max_batches:
                if self._held is not None:
                    self._held.release()
                b = self.next_batch(batch_size)
                self._held = b
                n += 1
                yield b
        finally:
            # The loop ended (max_batches) or was left: break, return, the generator closed, or
            # an exception unwinding the loop, which reaches a generator as the same
            # GeneratorExit. A `with` block still open sees which when it ends; without one,
            # the loop is done with the batch, and the broker hears it now rather than with a
            # next pull that may never come. (Pull errors come with nothing held.)
            if self._blocks == 0 and self._held is not None and self._handle is not None:
                self._held.release()
                self._lib.stoker_consumer_flush(self._handle)  # failing: it warned; redelivered

    def epochs(self, count=None, batch_size=None):
        """A broker serving a dataset (docs/datasets.md): yields Epoch 0, 1, ... (count of them,
        or until the supply ends); iterating an Epoch yields its batches until the broker says
        its last item was delivered:

            for epoch in client.epochs(3):
                for batch in epoch:
                    train(batch)

        Batches are acknowledged as in batches(). Unless the broker keeps epochs strict
        (--strict-epochs), an epoch's last batches may already hold items of the next one
        (Batch.epoch_indices() tells each example's epoch); a batch that arrives with the news of the
        epoch's end opens the next Epoch. SupplyEnded is raised when the supply ends before an
        epoch did. BrokerRestarted is raised when the broker restarted meanwhile (its epochs
        start anew): an Epoch never mixes two brokers' items; call epochs() again to follow the
        new broker's, an event of kind "broker_restarted" says so too."""
        # Strict epochs (the default): a batch of only later epochs' items ends an Epoch too
        # (another consumer took the rest of it, and its end's news may trail the batch).
        # Overlapping epochs (--overlap-epochs) end only with the broker's news.
        # Followed from here: a broker that restarts starts its epochs anew, and an Epoch never
        # takes another broker's items (_look_for_restart, BrokerRestarted).
        self._broker_start, st = self._broker_started()
        self._epochs_strict = not (st.get("dataset") or {}).get("overlap", False)
        self._restarted = None
        # Restarts noticed before are not this run's.
        self._restarts_seen = self._broker_restarts()[0] if self._handle is not None else 0
        number = 0
        while count is None or number < count:
            yield Epoch(self, number, batch_size)
            number += 1

    def _by_items(self):
        # A plain consumer of strict epochs; a group's ranks go by the news (with the same step).
        return self.group is None and getattr(self, "_epochs_strict", False)

    def _epochs_ended(self):
        # Of the broker followed now: the ends counted before a restart were another broker's.
        if not self._handle:
            return 0
        return self._lib.stoker_consumer_epochs_ended(self._handle) - self._epochs_base

    # -- information --------------------------------------------------------------------------

    @property
    def delivery(self):
        """How batches arrive: "shm" (the broker's shared memory, on its host: mapped and used;
        a batch the full arena sent as bytes does not change it, see Batch.shared) or "socket";
        None before the first batch (nothing has arrived yet, so neither is known). After
        close(), what it was at close."""
        if self._handle is None:
            return self._delivery
        shm, sock = ctypes.c_uint64(), ctypes.c_uint64()
        self._lib.stoker_consumer_delivery_counts(self._handle, ctypes.byref(shm),
                                                  ctypes.byref(sock), None)
        if shm.value + sock.value == 0:
            return None
        return self._lib.stoker_consumer_delivery(self._handle).decode()

    def duplicates(self):
        """Examples that came to this client a second time and were dropped before you saw
        them (0 unless delivery broke its guarantee); after close(), the count at close."""
        if self._handle is None:
            return self._duplicates
        return self._lib.stoker_consumer_duplicates(self._handle)

    def status(self, timeout=3.0):
        """The broker's status as a dict with the keys of its /status page: uptime_s, schema,
        queue_depth, queue_depth_auto, max_bytes, queue_limit, counters (produced, acknowledged,
        queued, in_flight, redelivered, returned_unused, delivered, queued_bytes, refused,
        short_by_queues, discrepancy), producers_alive, trainers, producers (a list of dicts: id,
        name, session, state, queued, accepted, delivered, acknowledged, redelivered,
        returned_unused, next_seq, silent_s), events (the latest, at most 64: index, kind, producer,
        name, at, reason), labels (the producers' class-to-label maps: maps, each with producers,
        classes, listed, truncated and labels [{label, name, files}]; omitted)."""
        if self._handle is not None:
            return _status_json(self._lib, lambda buf, n, ln: self._lib.stoker_consumer_status_json(
                self._handle, buf, n, ln), lambda buf: self._lib.stoker_consumer_error(
                    self._handle).decode(errors="replace"))
        return status(self.url, token=self._token_value(), timeout=timeout)

    def _token_value(self):
        if self.token is not None:
            return self.token
        if self.token_file is not None:
            with open(self.token_file) as f:
                return f.readline().rstrip()
        return None

    def __iter__(self):
        return self.batches()


class Epoch:
    """One epoch of a dataset (Client.epochs): iterate it for its batches."""

    def __init__(self, client, number, batch_size):
        self.number = number
        self._client = client
        self._batch_size = batch_size

    def __iter__(self):
        c = self._client
        while True:
            b = None
            try:
                b = self._next(c)
            except BaseException:
                # A Ctrl-C (or any exception) after the batch came and before it is yielded:
                # kept for the next pull, so the loop that catches it and goes on loses nothing.
                if b is not None and c._held is not b and c._stashed is None:
                    c._stashed = b
                raise
            if b is None:
                return
            c._held = b
            yield b

    def _next(self, c):
        """The epoch's next batch, or None at its end."""
        if c._stashed is not None:
            if c._by_items() and _first_epoch(c._stashed) > self.number:
                return None  # a later epoch's batch: this epoch brought this consumer no more
            b, c._stashed = c._stashed, None
            return b
        if c._epochs_ended() > self.number:
            return None
        if c._held is not None:
            c._held.release()
            c._held = None
        try:
            # An epoch may end for this job while no batch is coming (other jobs sharing the
            # producers still take theirs): the news ends the wait.
            b = c.next_batch(self._batch_size, _until=lambda: c._epochs_ended() > self.number)
        except SupplyEnded:
            if c._epochs_ended() > self.number:
                return None
            raise
        if b is None:
            return None
        try:
            return self._checked(c, b)
        except BaseException:
            if c._stashed is None:
                c._stashed = b  # a Ctrl-C before it was handed over: the next pull's
            raise

    def _checked(self, c, b):
        """b, just pulled, if it is this epoch's; else stashed for the next (None)."""
        if c._restarted is not None:
            # The new broker's first batch: kept for the Epochs of a next epochs().
            c._stashed = b
            (reason, uptime), c._restarted = c._restarted, None
            raise BrokerRestarted("%s; Epoch(%d) stops here: call epochs() again to go on with "
                                  "the new broker's epochs" % (reason, self.number), self.number,
                                  uptime)
        if c._epochs_ended() > self.number or (c._by_items() and _first_epoch(b) > self.number):
            # Came with the news of this epoch's end, or holds only later epochs' items (another
            # consumer took the rest of this one; a group's ranks go by the news, which comes
            # with the same step on each): the next epoch's first.
            c._stashed = b
            return None
        return b

    def __repr__(self):
        return "Epoch(%d)" % self.number


def _first_epoch(batch):
    """The earliest epoch a dataset batch holds items of (-1 for none: a stream's batch)."""
    epochs = batch.epoch_indices()
    if _np is not None:
        return int(epochs[0].min()) if len(epochs[0]) else -1
    return min(e for e, _ in epochs) if epochs else -1


def _status_json(lib, call, why):
    cap = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(cap)
        ln = ctypes.c_size_t()
        rv = call(buf, cap, ctypes.byref(ln))
        if rv == _lib.TOO_LARGE:
            cap = ln.value + 1
            continue
        if rv != _lib.OK:
            _raise(rv, "status: " + why(buf))
        return json.loads(buf.value.decode())


def status(url, token=None, timeout=3.0, *, tls_ca=None, tls_cert=None, tls_key=None,
           tls_insecure=False):
    """The status of the broker at url (see Client.status), without connecting as a consumer.
    A tls+tcp:// url takes the TLS settings of Client (tls_ca required unless tls_insecure);
    a TLS failure raises TLSError naming it."""
    paths, insecure = _tls_args(url, tls_ca, tls_cert, tls_key, tls_insecure)
    lib = _lib.load()
    o = _lib.Options()
    lib.stoker_consumer_options_init(ctypes.byref(o))
    keep = []

    def cstr(s):
        if s is None:
            return None
        b = s.encode() if isinstance(s, str) else bytes(s)
        keep.append(b)
        return b

    o.url = cstr(url)
    o.token = cstr(token)
    _set_tls(o, cstr, paths, insecure)
    return _status_json(lib, lambda buf, n, ln: lib.stoker_status_json_opts(
        ctypes.byref(o), int(timeout * 1000), buf, n, ln),
        lambda buf: buf.value.decode(errors="replace"))
