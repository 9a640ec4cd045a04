#!/usr/bin/env python3
"""Checks that stoker's safetensors files are readable by other tools.

Runs the safetensors tests of test_mlp (argv[1]) with STOKER_SAFETENSORS_DIR set, so they keep
fixture.safetensors (known values) and mlp.safetensors (a saved network), then parses both with
the standard library only (json, struct) following the format's specification, and with numpy
when it is importable. It does not need PyTorch or the safetensors package.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile


def fail(msg):
    print(f"check_safetensors: FAIL: {msg}")
    sys.exit(1)


def parse(path):
    """Returns (header dict without __metadata__, metadata, data bytes), checking the layout."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail(f"{path}: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        fail(f"{path}: header length {n} exceeds the file ({len(blob)} bytes)")
    if (8 + n) % 8 != 0:
        fail(f"{path}: data does not start 8-byte aligned (header length {n})")
    raw = blob[8:8 + n]
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{path}: header is not JSON: {e}")
    if not isinstance(header, dict):
        fail(f"{path}: header is not an object")
    # Parsed again keeping pairs: a dict would hide the order the names were written in.
    pairs = json.loads(raw.decode("utf-8"), object_pairs_hook=lambda p: p)
    tensor_keys = [k for k, _ in pairs if k != "__metadata__"]
    if tensor_keys != sorted(tensor_keys):
        fail(f"{path}: tensor names not sorted: {tensor_keys}")
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    # data_offsets must tile the data section exactly, in name order.
    end = 0
    for name in sorted(header):
        t = header[name]
        if t.get("dtype") != "F32":
            fail(f"{path}: {name}: dtype {t.get('dtype')}, want F32")
        begin, stop = t["data_offsets"]
        count = 1
        for d in t["shape"]:
            count *= d
        if begin != end or stop - begin != 4 * count:
            fail(f"{path}: {name}: data_offsets {t['data_offsets']} do not follow {end} "
                 f"for shape {t['shape']}")
        end = stop
    if end != len(data):
        fail(f"{path}: tensors cover {end} bytes, data section has {len(data)}")
    return header, meta, data


def values(header, data, name):
    begin, stop = header[name]["data_offsets"]
    return list(struct.unpack(f"<{(stop - begin) // 4}f", data[begin:stop]))


FIXTURE = {
    "layers.0.weight": ([3, 2], lambda i: 0.25 * i - 1.0),
    "layers.0.bias": ([3], lambda i: 0.5 * i),
    "layers.1.weight": ([1, 3], lambda i: -0.125 * i),
    "layers.1.bias": ([1], lambda i: 42.0),
}


def check_fixture(path):
    header, meta, data = parse(path)
    if meta.get("format") != "pt":
        fail(f"{path}: __metadata__ {meta}, want format pt")
    if sorted(header) != sorted(FIXTURE):
        fail(f"{path}: tensors {sorted(header)}, want {sorted(FIXTURE)}")
    for name, (shape, fn) in FIXTURE.items():
        if header[name]["shape"] != shape:
            fail(f"{path}: {name} shape {header[name]['shape']}, want {shape}")
        got = values(header, data, name)
        want = [fn(i) for i in range(len(got))]
        if got != want:
            fail(f"{path}: {name} values {got}, want {want}")
    return header, data


def check_mlp(path):
    header, _, data = parse(path)
    layers = sorted({int(k.split(".")[1]) for k in header})
    if layers != list(range(len(layers))) or len(header) != 2 * len(layers):
        fail(f"{path}: tensor names {sorted(header)} are not layers.N.weight/bias for N=0..")
    prev_out = None
    for n in layers:
        w = header[f"layers.{n}.weight"]["shape"]
        b = header[f"layers.{n}.bias"]["shape"]
        if len(w) != 2 or b != [w[0]]:
            fail(f"{path}: layer {n} weight {w}, bias {b}: want [out, in] and [out]")
        if prev_out is not None and w[1] != prev_out:
            fail(f"{path}: layer {n} takes {w[1]} inputs, layer {n - 1} gives {prev_out}")
        prev_out = w[0]
        if any(v != v for v in values(header, data, f"layers.{n}.weight")):
            fail(f"{path}: layer {n} has NaN weights")
    return header, data


def check_with_numpy(path, header, data):
    try:
        import numpy as np
    except ImportError:
        print("check_safetensors: numpy not importable, checked with struct only")
        return
    for name, t in header.items():
        begin, stop = t["data_offsets"]
        arr = np.frombuffer(data[begin:stop], dtype="<f4").reshape(t["shape"])
        if not np.array_equal(arr.ravel(), np.array(values(header, data, name), dtype="<f4")):
            fail(f"{path}: numpy disagrees on {name}")
    print(f"check_safetensors: numpy {np.__version__} reads {os.path.basename(path)}")


def main():
    if len(sys.argv) != 2:
        print("usage: check_safetensors.py PATH/TO/test_mlp", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="stoker-st-py-") as tmp:
        env = dict(os.environ, STOKER_SAFETENSORS_DIR=tmp)
        run = subprocess.run([sys.argv[1], "--filter", "safetensors/*", "-j1"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if run.returncode != 0:
            print(run.stdout)
            fail(f"{sys.argv[1]} exited with {run.returncode}")
        for name in ("fixture.safetensors", "mlp.safetensors"):
            if not os.path.exists(os.path.join(tmp, name)):
                fail(f"{name} was not written (test output:\n{run.stdout})")
        fixture = os.path.join(tmp, "fixture.safetensors")
        check_with_numpy(fixture, *check_fixture(fixture))
        saved = os.path.join(tmp, "mlp.safetensors")
        check_with_numpy(saved, *check_mlp(saved))
        leftovers = sorted(set(os.listdir(tmp)) - {"fixture.safetensors", "mlp.safetensors"})
        if leftovers:
            fail(f"temporary files left behind: {leftovers}")
    print("check_safetensors: 2 files OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
