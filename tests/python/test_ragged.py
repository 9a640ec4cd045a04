"""stoker.ragged (docs/python.md, "Variable-length fields"): padded arrays with lengths or an
attention mask, packed input_ids / position_ids / cu_seqlens, torch.nested tensors, in numpy and
in torch, checked value by value against what tests/lib/var_producer.c made (every byte follows
from the example's label) on batches of a real broker fed by real producers, over the socket and
through the broker's shared memory (read-only views)."""

import os

from helpers import Cluster, require, run

np = require("numpy")
import stoker  # noqa: E402
from var_data import expected, n_points, n_tokens, var_producer  # noqa: E402


def want_tokens(seq):
    return np.frombuffer(expected(seq)[0], dtype="<i4")


def want_points(seq):
    return np.frombuffer(expected(seq)[1], dtype="<f4").reshape(-1, 3)


def check_numpy(batch):
    labels = [int(x) for x in batch["label"][:, 0]]
    tok = batch["tokens"]
    lens = [n_tokens(s) for s in labels]

    padded, lengths = tok.pad(pad_value=-7, multiple_of=8)
    assert lengths.dtype == np.int64 and lengths.tolist() == lens
    assert padded.dtype == np.int32 and padded.shape[0] == len(labels)
    assert padded.shape[1] % 8 == 0 and padded.shape[1] - 8 < max(lens) <= padded.shape[1]
    for i, s in enumerate(labels):
        assert (padded[i, :lens[i]] == want_tokens(s)).all(), "example %d" % s
        assert (padded[i, lens[i]:] == -7).all(), "example %d: padding" % s
    assert padded.flags.writeable  # a new array even when the batch is read-only shared memory

    same, mask = stoker.ragged.pad(tok, mask=True)
    assert same.shape == (len(labels), max(lens)) and mask.dtype == np.bool_
    assert mask.sum(axis=1).tolist() == lens
    assert all(mask[i, :n].all() and not mask[i, n:].any() for i, n in enumerate(lens))
    assert (same[~mask] == 0).all()

    p = tok.pack()
    assert p.input_ids is tok.values  # no copy
    assert p.cu_seqlens.dtype == np.int32 and p.cu_seqlens.tolist() == [0] + list(
        np.cumsum(lens))
    assert p.position_ids.dtype == np.int64
    assert p.position_ids.tolist() == [j for n in lens for j in range(n)]
    assert p.max_seqlen == max(lens)
    for i, s in enumerate(labels):
        a, b = p.cu_seqlens[i], p.cu_seqlens[i + 1]
        assert (p.input_ids[a:b] == want_tokens(s)).all()

    pts, plen = batch["points"].pad(pad_value=np.nan)
    assert pts.shape == (len(labels), max(n_points(s) for s in labels), 3)
    for i, s in enumerate(labels):
        assert plen[i] == n_points(s)
        assert pts[i, :plen[i]].tobytes() == want_points(s).tobytes()
        assert np.isnan(pts[i, plen[i]:]).all()

    if max(lens) > 0:
        try:
            tok.pad(width=max(lens) - 1)
            raise AssertionError("a value longer than width was cut short")
        except ValueError as e:
            i = lens.index(max(lens))
            assert "example %d has %d values" % (i, max(lens)) in str(e), e
    return labels


def check_torch(batch, torch):
    labels = [int(x) for x in batch["label"][:, 0]]
    lens = [n_tokens(s) for s in labels]
    t = stoker.torch.tensors(batch)
    tok = t["tokens"]
    assert isinstance(tok.values, torch.Tensor)

    padded, mask = tok.pad(pad_value=3, multiple_of=16, mask=True)
    assert padded.dtype == torch.int32 and mask.dtype == torch.bool
    assert padded.shape[1] % 16 == 0 and padded.shape[1] >= max(lens)
    for i, s in enumerate(labels):
        assert padded[i, :lens[i]].numpy().tobytes() == want_tokens(s).tobytes()
        assert (padded[i, lens[i]:] == 3).all()
        assert int(mask[i].sum()) == lens[i] and bool(mask[i, :lens[i]].all())

    p = tok.pack()
    assert p.cu_seqlens.dtype == torch.int32 and p.position_ids.dtype == torch.int64
    assert p.cu_seqlens.tolist() == [0] + np.cumsum(lens).tolist()
    assert p.position_ids.tolist() == [j for n in lens for j in range(n)]
    assert p.max_seqlen == max(lens)

    nt = stoker.ragged.nested(batch["tokens"])  # from numpy too
    assert nt.is_nested
    for i, part in enumerate(nt.unbind()):
        assert part.numpy().tobytes() == want_tokens(labels[i]).tobytes()
    pn = t["points"].nested()
    for i, part in enumerate(pn.unbind()):
        assert tuple(part.shape) == (n_points(labels[i]), 3)
        assert part.numpy().tobytes() == want_points(labels[i]).tobytes()


def test_helpers_give_every_value_in_numpy_and_torch():
    try:
        import torch
        import stoker.torch  # noqa: F401
    except ImportError as e:
        torch = None
        print("torch is not importable (%s): its half of this test is not run" % e)
    for shm in ("0", "1"):
        os.environ["STOKER_SHM"] = shm
        try:
            with Cluster() as c:
                var_producer(c, "a", 150, "--chunk", "5")
                var_producer(c, "b", 100)
                seen = []
                with stoker.Client(c.url, stall_timeout=10) as client:
                    try:
                        while True:
                            b = client.next_batch(16)
                            seen += check_numpy(b)
                            if torch is not None:
                                check_torch(b, torch)
                            b.release()
                    except stoker.SupplyEnded:
                        pass
                assert sorted(seen) == sorted(list(range(150)) + list(range(100))), len(seen)
        finally:
            del os.environ["STOKER_SHM"]


def test_an_empty_batch_and_bad_arguments():
    r = stoker.Ragged(np.zeros(0, np.int32), np.zeros(1, np.int64))
    padded, lengths = r.pad(multiple_of=8)
    assert padded.shape == (0, 0) and lengths.shape == (0,)
    p = r.pack()
    assert p.cu_seqlens.tolist() == [0] and p.max_seqlen == 0 and len(p.position_ids) == 0
    r = stoker.Ragged(np.arange(5, dtype=np.int32), np.array([0, 2, 5], np.int64))
    assert r.pad(width=6)[0].tolist() == [[0, 1, 0, 0, 0, 0], [2, 3, 4, 0, 0, 0]]
    for kw, msg in (({"multiple_of": 0}, "multiple_of=0"), ({"width": -1}, "width=-1"),
                    ({"width": 2}, "example 1 has 3 values")):
        try:
            r.pad(**kw)
            raise AssertionError("%r accepted" % kw)
        except ValueError as e:
            assert msg in str(e), e
    try:
        stoker.ragged.pack(np.arange(3))
        raise AssertionError("an array accepted")
    except TypeError as e:
        assert "stoker.Ragged" in str(e), e


run(globals())
