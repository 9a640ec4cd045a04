"""stoker.ragged: what models take, made from a variable-length field (a stoker.Ragged).

A stoker.Ragged holds every example's value concatenated (`values`) and where each starts
(`offsets`, count + 1 entries, offsets[0] == 0). These helpers turn it into the three forms
models take (docs/python.md, "Variable-length fields"):

    padded, lengths = stoker.ragged.pad(r, pad_value=0, multiple_of=8)
    padded, mask = stoker.ragged.pad(r, mask=True)       # mask[i, j]: j < length of i
    p = stoker.ragged.pack(r)     # p.input_ids, p.position_ids, p.cu_seqlens, p.max_seqlen
    p = stoker.ragged.pack(r, row=2048)  # rows of 2048 (a Client(pack=2048) batch)
    nt = stoker.ragged.nested(r)  # a torch.nested tensor (needs torch)

The same are methods of stoker.Ragged: r.pad(...), r.pack(), r.nested(). They work on numpy
(a Ragged of stoker.Client's batches, no torch needed) and on torch tensors (a Ragged of
stoker.torch.tensors(batch) or of StokerIterableDataset: the results are tensors on the
values' device). A field with dims after the variable one (points:float32[?,3]) pads and
packs along its first dim only: padded is (examples, width, 3), input_ids (rows, 3).
"""

from collections import namedtuple

__all__ = ["Packed", "pad", "pack", "nested", "attention_mask"]

Packed = namedtuple("Packed", ["input_ids", "position_ids", "cu_seqlens", "max_seqlen"])
Packed.__doc__ = """A batch's sequences packed end to end, as variable-length attention kernels
(flash_attn_varlen_func, xformers, Hugging Face's padding-free collators) take them:
input_ids  every value, concatenated (the Ragged's values: no copy), shape (rows, ...)
position_ids  int64, each value's position within its own sequence (0 at each start)
cu_seqlens int32, count + 1 entries: 0, then the cumulative lengths (sequence i is
           input_ids[cu_seqlens[i]:cu_seqlens[i+1]])
max_seqlen the longest sequence's length (a Python int; 0 for an empty batch)
For a model that wants a batch dimension (Hugging Face: (1, rows)) add it: p.input_ids[None]."""


def _is_torch(x):
    mod = type(x).__module__
    return mod.startswith("torch")


def _parts(r):
    values, offsets = getattr(r, "values", None), getattr(r, "offsets", None)
    if values is None or offsets is None:
        raise TypeError("expected a stoker.Ragged (values and offsets), got %s"
                        % type(r).__name__)
    if isinstance(offsets, memoryview):
        raise TypeError("stoker.ragged needs numpy (or torch): this Ragged holds memoryviews")
    return values, offsets


def _lengths(offsets):
    return offsets[1:] - offsets[:-1]


def _positions(offsets, lengths, total, torch_mod=None):
    """Each row's position within its own example, and the example it belongs to."""
    if torch_mod is not None:
        owner = torch_mod.repeat_interleave(
            torch_mod.arange(len(lengths), device=offsets.device), lengths)
        pos = torch_mod.arange(total, device=offsets.device) - offsets[:-1][owner]
        return pos, owner
    import numpy as np
    owner = np.repeat(np.arange(len(lengths)), lengths)
    pos = np.arange(total, dtype=np.int64) - offsets[:-1][owner]
    return pos, owner


def _width(lengths, multiple_of, width):
    longest = int(lengths.max()) if len(lengths) else 0
    if width is not None:
        width = int(width)
        if width < 0:
            raise ValueError("width=%d: give a width of 0 or more" % width)
        if longest > width:
            i = int((lengths > width).nonzero()[0][0])
            raise ValueError("width=%d: example %d has %d values (a longer one is never cut "
                             "short; pad to a larger width or leave width unset)"
                             % (width, i, int(lengths[i])))
    else:
        width = longest
    if multiple_of is not None:
        m = int(multiple_of)
        if m < 1:
            raise ValueError("multiple_of=%d: give a multiple of 1 or more" % m)
        width = -(-width // m) * m
    return width


def attention_mask(lengths, width):
    """A boolean (examples, width) mask, True where j < lengths[i] (a real value, not padding).
    lengths a numpy array or a tensor (the result is of the same kind)."""
    if _is_torch(lengths):
        import torch
        return torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]
    import numpy as np
    return np.arange(width)[None, :] < np.asarray(lengths)[:, None]


def pad(r, pad_value=0, multiple_of=None, width=None, mask=False):
    """Every example's value in one padded array: (padded, lengths), or (padded, mask) with
    mask=True (a boolean attention mask, True at real values).

    padded has shape (examples, width, dims after the first...) and the values' dtype; rows
    past an example's length hold pad_value. width is the longest example's length, or the
    given width (an example longer than it is an error naming it: nothing is cut short),
    rounded up to a multiple of multiple_of when given (tensor cores like multiples of 8).
    lengths are int64. numpy in, numpy out; torch in, torch out (on the values' device)."""
    values, offsets = _parts(r)
    n = len(offsets) - 1
    total = int(offsets[-1]) if n >= 0 and len(offsets) else 0
    if _is_torch(values):
        import torch
        offsets = offsets.to(values.device) if _is_torch(offsets) else \
            torch.as_tensor(offsets, device=values.device)
        lengths = _lengths(offsets)
        w = _width(lengths.cpu().numpy(), multiple_of, width)
        out = torch.full((n, w) + tuple(values.shape[1:]), pad_value, dtype=values.dtype,
                         device=values.device)
        if total:
            pos, owner = _positions(offsets, lengths, total, torch)
            out[owner, pos] = values[:total]
    else:
        import numpy as np
        offsets = np.asarray(offsets, dtype=np.int64)
        lengths = _lengths(offsets)
        w = _width(lengths, multiple_of, width)
        out = np.full((n, w) + tuple(values.shape[1:]), pad_value, dtype=values.dtype)
        if total:
            pos, owner = _positions(offsets, lengths, total)
            out[owner, pos] = values[:total]
    if mask:
        return out, attention_mask(lengths, w)
    return out, lengths


def pack(r, row=None, whole=False, rows=None, pad_value=0):
    """The examples packed end to end: a Packed(input_ids, position_ids, cu_seqlens,
    max_seqlen) (see Packed). input_ids is the Ragged's values itself (no copy).

    row=L lays them out in rows of L values, the layout of a Client(pack=L) batch: input_ids
    and position_ids of shape (rows, L, dims after the first...). The values flow across rows
    (a sequence that reaches a row's end goes on in the next), or with whole=True a sequence
    that does not fit the current row starts the next (one longer than a row is split all the
    same). Each row's unused tail holds pad_value; rows=N adds rows of pad_value up to N (every
    rank of a group the same shape; fewer than the values need is an error). cu_seqlens then
    bounds segments of the flattened rows (rows x L): every piece of a sequence within a row is
    one, and so is every row's padded tail, so that a variable-length attention kernel over the
    flattened rows never attends across a row or into padding; position_ids restart at 0 at
    each segment. max_seqlen is the longest segment."""
    if row is not None:
        return _pack_rows(r, int(row), bool(whole), rows, pad_value)
    values, offsets = _parts(r)
    total = int(offsets[-1]) if len(offsets) else 0
    if _is_torch(values) or _is_torch(offsets):
        import torch
        offsets = torch.as_tensor(offsets)
        lengths = _lengths(offsets)
        pos, _ = _positions(offsets, lengths, total, torch)
        cu = offsets.to(torch.int32)
        device = values.device if _is_torch(values) else offsets.device
        pos, cu = pos.to(device), cu.to(device)
    else:
        import numpy as np
        offsets = np.asarray(offsets, dtype=np.int64)
        lengths = _lengths(offsets)
        pos, _ = _positions(offsets, lengths, total)
        cu = offsets.astype(np.int32)
    if total >= 1 << 31:
        raise ValueError("%d values do not fit cu_seqlens' int32" % total)
    longest = int(lengths.max()) if len(lengths) else 0
    return Packed(values, pos, cu, longest)


def _pack_rows(r, row, whole, rows, pad_value):
    import numpy as np
    if row < 1:
        raise ValueError("row=%d: give a row length of 1 or more" % row)
    values, offsets = _parts(r)
    torch_in = _is_torch(values)
    offs = (offsets.cpu().numpy() if _is_torch(offsets) else np.asarray(offsets)).astype(np.int64)
    lengths = offs[1:] - offs[:-1]
    # Where each value goes in the flattened rows, and the segments' ends.
    dest = np.empty(int(offs[-1]) if len(offs) else 0, dtype=np.int64)
    ends = []
    at = 0  # the next free position of the flattened rows
    for i, n in enumerate(lengths.tolist()):
        used = at % row
        if whole and used and used + n > row:
            ends.append(at - used + row)  # this row's padded tail: a segment of its own
            at += row - used
        src = int(offs[i])
        while n > 0:
            piece = min(n, row - at % row)
            dest[src:src + piece] = np.arange(at, at + piece)
            at += piece
            src += piece
            n -= piece
            ends.append(at)
    need = -(-at // row)
    if rows is None:
        rows = need
    elif int(rows) < need:
        raise ValueError("rows=%d: this batch's sequences take %d rows of %d" % (rows, need, row))
    rows = int(rows)
    if at < rows * row:
        if at % row:
            ends.append(at - at % row + row)
        for k in range(-(-at // row) + 1 if at % row == 0 else need + 1, rows + 1):
            ends.append(k * row)
    if rows * row >= 1 << 31:
        raise ValueError("%d values do not fit cu_seqlens' int32" % (rows * row))
    cu = np.array([0] + ends, dtype=np.int64)
    seg_len = cu[1:] - cu[:-1]
    pos = np.arange(rows * row, dtype=np.int64) - np.repeat(cu[:-1], seg_len)
    longest = int(seg_len.max()) if len(seg_len) else 0
    shape = (rows, row) + tuple(values.shape[1:])
    if torch_in:
        import torch
        out = torch.full((rows * row,) + tuple(values.shape[1:]), pad_value, dtype=values.dtype,
                         device=values.device)
        if len(dest):
            out[torch.as_tensor(dest, device=values.device)] = values[:len(dest)]
        return Packed(out.reshape(shape), torch.as_tensor(pos, device=values.device).reshape(
            rows, row), torch.as_tensor(cu.astype(np.int32), device=values.device), longest)
    out = np.full((rows * row,) + tuple(values.shape[1:]), pad_value, dtype=values.dtype)
    if len(dest):
        out[dest] = values[:len(dest)]
    return Packed(out.reshape(shape), pos.reshape(rows, row), cu.astype(np.int32), longest)


def nested(r):
    """The examples as a torch.nested tensor (each its own length). torch >= 2.3 gives the
    jagged layout over the values themselves (no copy); older versions copy each example into
    a strided nested tensor."""
    import torch
    values, offsets = _parts(r)
    if not _is_torch(values):
        import warnings
        with warnings.catch_warnings():  # read-only shared memory: see stoker.torch.tensors
            warnings.filterwarnings("ignore", message=".*not writable", category=UserWarning)
            values = torch.from_numpy(values)
    offsets = torch.as_tensor(offsets, device=values.device)
    from_jagged = getattr(torch.nested, "nested_tensor_from_jagged", None)
    if from_jagged is not None and values.dim() >= 1:
        return from_jagged(values, offsets)
    parts = [values[int(offsets[i]):int(offsets[i + 1])] for i in range(len(offsets) - 1)]
    import warnings
    with warnings.catch_warnings():  # torch 1.13: "nested tensors ... prototype stage"
        warnings.filterwarnings("ignore", message=".*prototype stage", category=UserWarning)
        return torch.nested.nested_tensor(parts)
