"""float16, bfloat16 and bool fields end to end: an exec producer writes raw records of known
values, and they arrive unchanged in the Python client (numpy float16, torch.bfloat16 when
torch is installed, numpy bool) and in stoker-pull's text and raw output."""

import struct
import subprocess
import sys

from helpers import BROKER, PULL, Cluster, require, run

np = require("numpy")
import stoker  # noqa: E402

SCHEMA = "i:int32[1],h:float16[2],b:bfloat16[2],t:bool[3]"
N = 60
# Example i: h = (i / 2, -i / 4) exactly in float16; b = (i, -2 i) exactly in bfloat16 (its
# patterns are the upper halves of the float32s); t = (i odd, 3 divides i, true).
GEN = r'''
import struct, sys
import numpy as np
out = sys.stdout.buffer
for i in range(%d):
    h = np.array([i / 2, -i / 4], dtype="<f2").tobytes()
    b = b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16)
                 for v in (float(i), -2.0 * i))
    out.write(struct.pack("<i", i) + h + b + bytes([i %% 2, i %% 3 == 0, 1]))
''' % N


def cluster():
    c = Cluster()
    c.producer("--generator", "exec", "--exec", "%s -c '%s'" % (sys.executable, GEN), "--schema",
               SCHEMA, "--format", "raw", "--chunk", "7")
    return c


def batches(client):
    """Every batch until the producer's end."""
    try:
        while True:
            b = client.next_batch(8)
            yield b
            b.release()
    except stoker.SupplyEnded:
        return


def test_the_python_client_gets_each_dtype_with_its_values():
    with cluster() as c:
        seen = {}
        with stoker.Client(c.url, stall_timeout=5) as client:
            for batch in batches(client):
                assert batch["h"].dtype == np.float16 and batch["t"].dtype == np.bool_
                b = batch["b"]
                try:
                    import torch
                    assert b.dtype == torch.bfloat16, b.dtype
                    b = b.float().numpy()
                except ImportError:  # the raw patterns, as a uint16 array
                    assert b.dtype == np.uint16
                    b = (b.astype(np.uint32) << 16).view(np.float32)
                for k in range(batch.count):
                    i = int(batch["i"][k, 0])
                    seen[i] = (batch["h"][k].tolist(), b[k].tolist(), batch["t"][k].tolist())
            assert [f.dtype for f in client.fields] == ["int32", "float16", "bfloat16", "bool"]
        assert sorted(seen) == list(range(N))
        for i, (h, b, t) in seen.items():
            assert h == [i / 2, -i / 4], (i, h)
            assert b == [float(i), -2.0 * i], (i, b)
            assert t == [i % 2 == 1, i % 3 == 0, True], (i, t)


def test_stoker_pull_text_prints_half_precision_as_numbers_and_bool_as_0_1():
    with cluster() as c:
        out = subprocess.run([PULL, "--broker", c.url, "--batch-size", "8", "--max-examples",
                              str(N)], capture_output=True, timeout=30)
        assert out.returncode == 0, out.stderr
        rows = sorted(line.split() for line in out.stdout.decode().splitlines())
        rows.sort(key=lambda r: int(r[0]))
        assert len(rows) == N
        for i, r in enumerate(rows):
            assert int(r[0]) == i
            assert [float(x) for x in r[1:5]] == [i / 2, -i / 4, float(i), -2.0 * i], r
            assert r[5:] == [str(i % 2), str(int(i % 3 == 0)), "1"], r


def test_stoker_pull_raw_gives_the_bytes_sent():
    with cluster() as c:
        out = subprocess.run([PULL, "--broker", c.url, "--format", "raw", "--batch-size", "8",
                              "--max-examples", str(N)], capture_output=True, timeout=30)
        assert out.returncode == 0, out.stderr
        sent = subprocess.run([sys.executable, "-c", GEN], capture_output=True,
                              check=True).stdout
        rec = 4 + 4 + 4 + 3
        assert len(out.stdout) == N * rec
        got = sorted(out.stdout[k * rec:(k + 1) * rec] for k in range(N))
        assert got == sorted(sent[k * rec:(k + 1) * rec] for k in range(N))


def test_an_unknown_dtype_is_refused_naming_it_and_the_dtypes_there_are():
    p = subprocess.run([BROKER, "--listen", "inproc://x", "--schema", "x:float8[2]"],
                       capture_output=True, timeout=10)
    assert p.returncode == 2, p
    assert b"float8" in p.stderr and b"bfloat16" in p.stderr and b"bool" in p.stderr, p.stderr


run(globals())
