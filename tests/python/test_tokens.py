"""The tokens generator: pre-tokenized shards in llm.c's format (a 256-int header,
uint16 tokens in version 1, uint32 in version 2) and in nanoGPT's plain uint16, made here, served
through a real broker and producers. As a stream every example is a window found at some offset of
some shard; as a dataset every window at --stride comes exactly once per epoch, equal to the
shard's tokens; bad shards and flags are refused naming the file or the flag."""

import os
import subprocess
import tempfile

from helpers import PRODUCER, Cluster, run, require

np = require("numpy")
import stoker  # noqa: E402

MAGIC = 20240520


def llmc_shard(path, tokens, version=1):
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = MAGIC, version, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2" if version == 1 else "<u4").tobytes())


def corpus(n, seed, vocab=50257):
    return np.random.default_rng(seed).integers(0, vocab, n)


def drain(url, batch_size, **kw):
    """Every batch's tokens (rows) and, for a dataset, (epoch, index) of each row."""
    rows, items = [], []
    with stoker.Client(url, batch_size=batch_size, stall_timeout=5, **kw) as client:
        try:
            for b in client.batches():
                rows.extend(np.array(b["tokens"]))
                ep, idx = b.epoch_indices()  # empty for a stream
                items.extend(zip(ep.tolist(), idx.tolist()))
        except stoker.SupplyEnded:
            pass
    return rows, items


def test_a_stream_of_windows_comes_from_the_shards_at_drawn_offsets():
    with tempfile.TemporaryDirectory() as d:
        shards = [corpus(3000, 1), corpus(5000, 2)]
        llmc_shard(os.path.join(d, "train_000.bin"), shards[0])
        llmc_shard(os.path.join(d, "train_001.bin"), shards[1])
        with Cluster() as c:
            c.producer("--generator", "tokens", "--tokens", d, "--window", "64",
                       "--max-examples", "400")
            rows, _ = drain(c.url, 16)
        assert len(rows) == 400, len(rows)
        text = [s.astype(np.int32).tobytes() for s in shards]
        offsets = set()
        for r in rows:
            assert r.dtype == np.int32 and r.shape == (64,), (r.dtype, r.shape)
            found = [(i, t.find(r.tobytes())) for i, t in enumerate(text)]
            hit = [(i, at // 4) for i, at in found if at >= 0 and at % 4 == 0]
            assert hit, "a window that is in no shard: %s" % r[:8]
            offsets.add(hit[0])
        assert {i for i, _ in offsets} == {0, 1}, "windows from one shard only"
        assert len(offsets) > 300, "only %d distinct offsets in 400 draws" % len(offsets)


def test_a_dataset_serves_every_window_once_per_epoch():
    window, stride, n_tokens = 33, 32, 32 * 40 + 1  # 40 windows with next-token targets
    with tempfile.TemporaryDirectory() as d:
        a, b = corpus(n_tokens, 3), corpus(n_tokens, 4, vocab=100000)
        llmc_shard(os.path.join(d, "a.bin"), a)
        llmc_shard(os.path.join(d, "b.bin"), b, version=2)  # uint32 tokens
        a.astype("<u2").tofile(os.path.join(d, "c.raw"))  # plain uint16, nanoGPT's
        want = {}
        for k, toks in enumerate([a, b]):
            for w in range(40):
                want[40 * k + w] = toks[w * stride: w * stride + window]
        with Cluster("--dataset-size", "auto", "--epochs", "2") as c:
            for i in range(2):
                c.producer("--generator", "tokens", "--tokens", os.path.join(d, "*.bin"),
                           "--window", str(window), "--stride", str(stride), "--dataset",
                           "--token-dtype", "int64")
            rows, items = drain(c.url, 8)
        assert len(rows) == 2 * 80, len(rows)
        for ep in (0, 1):
            got = sorted(i for e, i in items if e == ep)
            assert got == list(range(80)), "epoch %d: %s" % (ep, got)
        for r, (ep, i) in zip(rows, items):
            assert r.dtype == np.int64 and (r == want[i]).all(), "item %d differs" % i
        # The plain uint16 file alone, as nanoGPT writes it.
        with Cluster("--dataset-size", "auto", "--epochs", "1") as c:
            c.producer("--generator", "tokens", "--tokens", os.path.join(d, "c.raw"),
                       "--window", str(window), "--stride", str(stride), "--dataset",
                       "--token-dtype", "uint16")
            rows, items = drain(c.url, 8)
        assert sorted(i for _, i in items) == list(range(40))
        for r, (_, i) in zip(rows, items):
            assert r.dtype == np.uint16 and (r == a[i * stride: i * stride + window]).all()


def documents_of(tokens, eot, max_doc=0):
    """The runs between eot tokens (empty ones skipped), cut into pieces of max_doc."""
    docs, begin = [], 0
    for t in list(np.nonzero(tokens == eot)[0]) + [len(tokens)]:
        run = tokens[begin:t]
        while len(run) > 0:
            piece = run[:max_doc] if max_doc else run
            docs.append(piece)
            run = run[len(piece):]
        begin = t + 1
    return docs


def test_documents_split_at_the_end_of_text_token_as_a_variable_length_field():
    eot = 50256
    rng = np.random.default_rng(7)
    toks = []
    for _ in range(60):  # llm.c puts the end-of-text token before each document
        toks.append(eot)
        toks.extend(rng.integers(0, 50000, int(rng.integers(1, 300))))
    toks.extend([eot, eot])  # an empty run: skipped
    toks = np.array(toks)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "docs.bin")
        llmc_shard(path, toks)
        want = documents_of(toks, eot, max_doc=128)
        with Cluster("--dataset-size", "auto", "--epochs", "1") as c:
            c.producer("--generator", "tokens", "--tokens", path, "--split", "documents",
                       "--max-doc", "128", "--dataset")
            got = {}
            with stoker.Client(c.url, batch_size=7, stall_timeout=5) as client:
                try:
                    for b in client.batches():
                        r = b["tokens"]
                        assert isinstance(r, stoker.Ragged), type(r)
                        _, idx = b.epoch_indices()
                        for k, i in enumerate(idx.tolist()):
                            assert i not in got, "item %d twice" % i
                            got[i] = np.array(r[k])
                except stoker.SupplyEnded:
                    pass
        assert sorted(got) == list(range(len(want))), (len(got), len(want))
        for i, doc in enumerate(want):
            assert got[i].dtype == np.int32 and (got[i] == doc).all(), "document %d differs" % i
        assert max(len(v) for v in got.values()) == 128  # long documents were cut
        # As a stream: every example is one of the documents.
        with Cluster() as c:
            c.producer("--generator", "tokens", "--tokens", path, "--split", "documents",
                       "--max-examples", "200")
            seen = set(tuple(x.tolist()) for x in documents_of(toks, eot))
            n = 0
            with stoker.Client(c.url, batch_size=10, stall_timeout=5) as client:
                try:
                    for b in client.batches():
                        for v in b["tokens"]:
                            assert tuple(np.array(v).tolist()) in seen
                            n += 1
                except stoker.SupplyEnded:
                    pass
            assert n == 200, n


def refused(*args):
    out = subprocess.run([PRODUCER, "--broker", "ipc:///nowhere", "--generator", "tokens",
                          "--measure", "10"] + list(args),
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0, args
    return out.returncode, out.stderr


def test_bad_shards_and_flags_are_refused_naming_what_is_wrong():
    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "good.bin")
        llmc_shard(good, corpus(100, 5))
        short = os.path.join(d, "short.bin")
        with open(good, "rb") as f:
            data = f.read()
        with open(short, "wb") as f:
            f.write(data[:-6])  # the header says 100 tokens, the file holds 97
        odd = os.path.join(d, "odd.raw")
        with open(odd, "wb") as f:
            f.write(b"\x01\x02\x03")
        eots = os.path.join(d, "eots.bin")
        llmc_shard(eots, [7] * 50)
        wide = os.path.join(d, "wide.bin")
        llmc_shard(wide, corpus(100, 6), version=2)
        cases = [
            (["--tokens", short], "the header says 100 tokens"),
            (["--tokens", odd], "an odd size for plain uint16"),
            (["--tokens", wide, "--token-dtype", "uint16"], "do not fit --token-dtype uint16"),
            (["--tokens", good, "--window", "101"], "fewer than one window of 101"),
            (["--tokens", os.path.join(d, "nothing", "*.bin")], "no shard matches"),
            (["--tokens", os.path.join(d, "missing.bin")], "No such file"),
            (["--tokens", good, "--shard-format", "llmc", "--window", "4"], None),
            (["--tokens", odd, "--shard-format", "llmc"], "shorter than llm.c's"),
            (["--tokens", eots, "--split", "documents", "--eot", "7"], "no document"),
        ]
        for args, want in cases:
            if want is None:  # the good one: measured, exit 0
                out = subprocess.run([PRODUCER, "--generator", "tokens", "--measure", "10"]
                                     + args, capture_output=True, text=True, timeout=30)
                assert out.returncode == 0, out.stderr
                continue
            code, err = refused(*args)
            assert code == 1 and want in err, (args, code, err)
        usage = [
            (["--tokens", good, "--stride", "4"], "--stride applies with --dataset"),
            ([], "--generator tokens needs --tokens PATH"),
            (["--tokens", good, "--items", "5"], "--items applies to synthetic and exec"),
            (["--tokens", good, "--delay", "0:0"], "--delay applies"),
            (["--tokens", good, "--split", "documents", "--window", "8"],
             "--window and --stride apply to --split windows"),
            (["--tokens", good, "--eot", "3"], "--eot and --max-doc apply to --split documents"),
        ]
        for args, want in usage:
            code, err = refused(*args)
            assert code == 2 and want in err, (args, code, err)
        out = subprocess.run([PRODUCER, "--measure", "5", "--window", "8"], capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 2 and "--window needs --generator tokens" in out.stderr


if __name__ == "__main__":
    run(globals())
