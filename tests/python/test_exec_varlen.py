"""Variable-length values through `stoker-producer --generator exec` (docs/running.md, "exec"):
a Python program writes tokens:int32[?<=16],points:float32[?,2],label:int64 as text (a variable
field is its length in rows, then its numbers: `3 5 6 7`) and as raw records (a uint32 length,
then the rows, little-endian); every value arrives through a real broker byte for byte, each
example once. A value over its bound is refused at the producer (counted, the rest go on); bad
lengths (negative, not a number, more or fewer numbers than the lengths say, a record cut short,
a length no value could have) stop the producer with a message naming the line or record and
the field."""

import os
import subprocess
import sys
import tempfile

from helpers import BROKER, PRODUCER, Cluster, require, run  # noqa: F401

np = require("numpy")
import stoker  # noqa: E402

SCHEMA = "tokens:int32[?<=16],points:float32[?,2],label:int64"

GEN = r'''
import struct, sys
fmt, count, over = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = sys.stdout.buffer
for i in range(count):
    n = 17 if over and i % over == over - 1 else i % 17
    toks = [i * 100 + j for j in range(n)]
    pts = [v for r in range(i % 3) for v in (i + 0.5, -r)]
    if fmt == "text":
        out.write((" ".join(str(x) for x in [n] + toks + [i % 3] + pts + [i]) + "\n").encode())
    else:
        out.write(struct.pack("<I%di" % n, n, *toks) + struct.pack("<I%df" % len(pts), i % 3, *pts)
                  + struct.pack("<q", i))
'''


def gen_file(d):
    path = os.path.join(d, "gen.py")
    with open(path, "w") as f:
        f.write(GEN)
    return path


def want(i):
    n = i % 17
    toks = np.array([i * 100 + j for j in range(n)], "<i4")
    pts = np.array([[i + 0.5, -r] for r in range(i % 3)], "<f4").reshape(-1, 2)
    return toks.tobytes(), pts.tobytes()


def exec_producer(c, fmt, count, over=0, *extra):
    cmd = "%s %s %s %d %d" % (sys.executable, gen_file(c.dir), fmt, count, over)
    return subprocess.Popen([PRODUCER, "--broker", c.url, "--name", fmt, "--generator", "exec",
                             "--exec", cmd, "--schema", SCHEMA, "--format", fmt] + list(extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def drain(c):
    got = {}
    with stoker.Client(c.url, stall_timeout=10) as client:
        try:
            while True:
                b = client.next_batch(32)
                assert client.fields[0] == stoker.Field("tokens", "int32", (None,), 16)
                for i in range(b.count):
                    label = int(b["label"].reshape(-1)[i])
                    assert label not in got, "example %d delivered twice" % label
                    got[label] = (b["tokens"][i].tobytes(), b["points"][i].tobytes())
                b.release()
        except stoker.SupplyEnded:
            pass
    return got


def test_text_and_raw_carry_every_value():
    for fmt in ("text", "raw"):
        with Cluster() as c:
            p = exec_producer(c, fmt, 300)
            got = drain(c)
            _, err = p.communicate(timeout=20)
            assert p.returncode == 0, err
        assert sorted(got) == list(range(300)), (fmt, len(got))
        for i, (t, pts) in got.items():
            assert (t, pts) == want(i), "%s: example %d differs" % (fmt, i)


def test_a_value_over_its_bound_is_refused_and_counted():
    for fmt in ("text", "raw"):
        with Cluster() as c:
            p = exec_producer(c, fmt, 200, 10, "--log-level", "info")
            got = drain(c)
            _, err = p.communicate(timeout=20)
            assert p.returncode == 0, err
        refused = [i for i in range(200) if i % 10 == 9]
        assert sorted(got) == [i for i in range(200) if i not in refused], (fmt, len(got))
        for i, (t, pts) in got.items():
            assert (t, pts) == want(i), "%s: example %d differs" % (fmt, i)
        where = "line 10" if fmt == "text" else "record 10"
        assert "exec: %s: field tokens has length 17, over its bound 16" % where in err, err
        assert "20 refused" in err, err


def measure(d, schema, fmt, data):
    """stoker-producer --measure over a program that writes data: (exit code, stderr)."""
    path = os.path.join(d, "out." + fmt)
    with open(path, "wb") as f:
        f.write(data)
    p = subprocess.run([PRODUCER, "--generator", "exec", "--exec", "cat " + path, "--schema",
                        schema, "--format", fmt, "--measure", "10"],
                       capture_output=True, text=True, timeout=20)
    return p.returncode, p.stderr


def test_bad_lengths_are_named():
    import struct
    s = "tokens:int32[?<=4],label:int64"
    text_cases = [
        (b"2 1 2 5\n-1 3 5\n", "line 2: number 1 ('-1') is not a length for field tokens"),
        (b"x 1 2\n", "line 1: number 1 ('x') is not a length for field tokens"),
        (b"2.5 1 2\n", "('2.5') is not a length for field tokens"),
        (b"3 1 2 7\n", "line 1: ended after 0 of the 1 numbers of field label"),
        (b"3 1 2\n", "line 1: ended after 2 of the 3 numbers of field tokens (its length says"),
        (b"2 1 2 7 8\n", "line 1: 1 numbers more than the schema and the lengths say"),
        (b"1 99999999999 4\n", "number 2 ('99999999999') of field tokens is out of range"),
    ]
    raw_cases = [
        (struct.pack("<I3i", 3, 1, 2, 3) + struct.pack("<q", 1) + struct.pack("<I2i", 5, 1, 2),
         "record 2: the output ended inside the values of field tokens"),
        (struct.pack("<I", 1) + b"\x00\x00", "record 1: the output ended inside the values of "
         "field tokens"),
        (struct.pack("<I", 0) + struct.pack("<q", 1) + b"\x01",
         "record 2: the output ended inside the length of field tokens"),
        (struct.pack("<I", 0xffffffff) + b"\x00" * 64,
         "record 1: field tokens has length 4294967295 (17179869180 bytes), more than exec "
         "reads in one value (64 MiB) and over its bound"),
    ]
    with tempfile.TemporaryDirectory() as d:
        for data, msg in text_cases:
            code, err = measure(d, s, "text", data)
            assert code == 1 and msg in err, (data, code, err)
        for data, msg in raw_cases:
            code, err = measure(d, s, "raw", data)
            assert code == 1 and msg in err, (data, code, err)
        # A field without a bound takes any length a line holds.
        code, err = measure(d, "tokens:int32[?],label:int64", "text",
                            b"5 1 2 3 4 5 1\n0 2\n" * 5)
        assert code == 0, err


run(globals())
