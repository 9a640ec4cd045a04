"""stoker-producer --generator images --output encoded: each example is one image
file's bytes as they are on disk (image:bytes) and its class label, for decoding on the consumer
(torchvision.io.decode_jpeg on the GPU, nvJPEG, DALI). The test writes its own small JPEG, PNG,
BMP and TIFF files (with PIL when /usr/bin/python3 has it, else BMP files written here), runs a
real broker and producers, and checks every example byte for byte against the file it names by
content, with that file's label; as a dataset every file comes exactly once per epoch, item i
being the i-th file of the sorted listing. A file over --max-file-bytes is named with its size
and refused (counted), or stops a dataset at start; decoded-only flags are usage errors."""

import io
import os
import struct
import subprocess

from helpers import PRODUCER, Cluster, reap, require, run

np = require("numpy")
import stoker  # noqa: E402

try:
    from PIL import Image
except ImportError:  # BMP files written below instead
    Image = None


def bmp(width, height, seed):
    """An uncompressed 24-bit BMP (bottom-up rows, padded to 4 bytes)."""
    rng = np.random.default_rng(seed)
    row = (3 * width + 3) // 4 * 4
    pixels = b"".join(rng.integers(0, 256, 3 * width, dtype=np.uint8).tobytes()
                      + b"\0" * (row - 3 * width) for _ in range(height))
    header = struct.pack("<2sIHHI", b"BM", 54 + len(pixels), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(pixels), 2835, 2835,
                       0, 0)
    return header + info + pixels


def encode(fmt, width, height, seed):
    if Image is None or fmt == "BMP":
        return bmp(width, height, seed)
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    a = np.stack([(x * 7 + y) % 256, (y * 5 + x) % 256, (x * y) % 256], -1)
    a = (a + rng.integers(0, 16, a.shape)).clip(0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(a).save(out, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return out.getvalue()


# (class, file name, format, width, height): the listing's order is classes by name, files by
# name within each (item i of a dataset is the i-th of these).
FILES = [
    ("cat", "a.jpg", "JPEG", 40, 30),
    ("cat", "b.png", "PNG", 17, 23),
    ("cat", "c.bmp", "BMP", 9, 7),
    ("dog", "a.jpeg", "JPEG", 64, 48),
    ("dog", "b.tiff", "TIFF", 12, 10),
    ("emu", "x.png", "PNG", 33, 5),
]


def make_folder(root, files=FILES):
    """Writes files under root; returns [(bytes, label)] in listing order."""
    classes = sorted({c for c, *_ in files})
    want = []
    for k, (cls, name, fmt, w, h) in enumerate(files):
        os.makedirs(os.path.join(root, cls), exist_ok=True)
        data = encode(fmt, w, h, k)
        with open(os.path.join(root, cls, name), "wb") as f:
            f.write(data)
        want.append((data, classes.index(cls)))
    assert len({d for d, _ in want}) == len(want), "two files with the same bytes"
    return want


def examples(url, batch_size, **kw):
    """[(bytes, label, (epoch, index) or None)] of every example the broker hands out, and the
    consumer's schema."""
    got = []
    with stoker.Client(url, batch_size=batch_size, stall_timeout=5, **kw) as client:
        schema = client.schema
        try:
            for b in client.batches():
                image, label = b["image"], np.array(b["label"])
                assert isinstance(image, stoker.Ragged), type(image)
                assert image.values.dtype == np.uint8 and image.offsets.dtype == np.int64
                assert label.dtype == np.int64 and label.shape == (len(image),), label
                ep, idx = b.epoch_indices()
                items = list(zip(ep.tolist(), idx.tolist())) or [None] * len(image)
                got.extend((bytes(image[i]), int(label[i]), items[i])
                           for i in range(len(image)))
        except stoker.SupplyEnded:
            pass
    return got, schema


def test_a_stream_sends_every_file_byte_for_byte_with_its_label():
    with Cluster() as c:
        want = dict(make_folder(os.path.join(c.dir, "images")))
        c.producer("--generator", "images", "--images", os.path.join(c.dir, "images"),
                   "--output", "encoded", "--max-examples", "300")
        got, schema = examples(c.url, 16)
        assert schema == "image:uint8[?],label:int64[]", schema  # image:bytes
        assert len(got) == 300, len(got)
        for data, label, _ in got:
            assert data in want, "an example that is no file's bytes (%d bytes)" % len(data)
            assert label == want[data], (label, want[data])
        assert {d for d, _, _ in got} == set(want), "files never drawn in 300 examples"


def test_a_dataset_sends_every_file_once_per_epoch():
    with Cluster("--dataset-size", "auto", "--epochs", "3") as c:
        want = make_folder(os.path.join(c.dir, "images"))
        for _ in range(2):  # two producers of the same files share the items
            c.producer("--generator", "images", "--images", os.path.join(c.dir, "images"),
                       "--output", "encoded", "--dataset", "--label", "int32",
                       "--max-file-bytes", "100000", "--chunk", "2")
        got = []
        with stoker.Client(c.url, batch_size=4, stall_timeout=5) as client:
            try:
                for b in client.batches():
                    image, label = b["image"], np.array(b["label"])
                    assert label.dtype == np.int32 and label.shape == (len(image), 1), label
                    ep, idx = b.epoch_indices()
                    got.extend((bytes(image[i]), int(label[i, 0]), (int(ep[i]), int(idx[i])))
                               for i in range(len(image)))
            except stoker.SupplyEnded:
                pass
        items = sorted(item for _, _, item in got)
        assert items == [(e, i) for e in range(3) for i in range(len(want))], items
        for data, label, (_, index) in got:
            assert (data, label) == want[index], (index, len(data), label)


def test_torchvision_decodes_a_received_jpeg_as_pil_does():
    try:
        import torch
        import torchvision
        from torchvision.io import decode_jpeg
    except ImportError as e:
        print("torchvision is not importable by this python (%s): the decode check is not run"
              % e)
        return
    if Image is None:
        print("PIL is not importable: no JPEG was written, the decode check is not run")
        return
    from stoker.torch import tensors
    with Cluster() as c:
        want = make_folder(os.path.join(c.dir, "images"), FILES[:1] + FILES[3:4])  # two JPEGs
        c.producer("--generator", "images", "--images", os.path.join(c.dir, "images"),
                   "--output", "encoded", "--max-examples", "8")
        with stoker.Client(c.url, batch_size=8, stall_timeout=5) as client:
            batch = tensors(next(iter(client.batches())), copy=True)
        image = batch["image"]
        assert image.values.dtype == torch.uint8 and image.offsets.dtype == torch.int64
        decoded = 0
        for i in range(len(image)):
            data = image[i]
            pil = np.asarray(Image.open(io.BytesIO(data.numpy().tobytes())).convert("RGB"))
            tv = decode_jpeg(data).permute(1, 2, 0).numpy()  # (3, H, W) -> (H, W, 3)
            assert tv.shape == pil.shape, (tv.shape, pil.shape)
            diff = int(np.abs(tv.astype(int) - pil.astype(int)).max())
            assert diff <= 1, "torchvision and PIL decode differ by %d" % diff
            assert int(batch["label"][i]) == dict(want)[data.numpy().tobytes()]
            decoded += 1
        assert decoded == 8
        print("torchvision %s decoded %d received JPEGs as PIL does" %
              (torchvision.__version__, decoded))


def test_a_file_over_the_bound_is_named_and_refused():
    with Cluster() as c:
        want = dict(make_folder(os.path.join(c.dir, "images")))
        sizes = sorted(len(d) for d in want)
        bound = sizes[-2]  # the largest file alone is over it
        big = max(want, key=len)
        p = c.producer("--generator", "images", "--images", os.path.join(c.dir, "images"),
                       "--output", "encoded", "--max-file-bytes", str(bound),
                       "--max-examples", "200", "--log-level", "info",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        got, schema = examples(c.url, 10)
        [(rc, _, err)] = reap([p], 20)
        assert rc == 0, err
        assert schema == "image:uint8[?<=%d],label:int64[]" % bound, schema
        assert len(got) == 200 and all(d in want and d != big for d, _, _ in got), len(got)
        line = [ln for ln in err.splitlines() if "/dog/a.jpeg' is %d bytes, over the image "
                "field's bound (--max-file-bytes) %d bytes" % (len(big), bound) in ln]
        assert line, err[-3000:]
        refused = [ln for ln in err.splitlines() if " refused " in ln and "finished" in ln]
        assert refused and int(refused[0].split(" refused")[0].split()[-1]) > 0, err[-2000:]
        # As a dataset the file cannot be skipped: the producer stops at start, naming it.
    with Cluster("--dataset-size", "auto") as c:
        make_folder(os.path.join(c.dir, "images"))
        r = subprocess.run([PRODUCER, "--broker", c.url, "--generator", "images", "--images",
                            os.path.join(c.dir, "images"), "--output", "encoded", "--dataset",
                            "--max-file-bytes", str(bound)],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert "/dog/a.jpeg' (item 3) is %d bytes, over the image field's bound " \
               "(--max-file-bytes) %d bytes, and a dataset item cannot be skipped" \
               % (len(big), bound) in r.stderr, r.stderr


def test_decoded_only_flags_are_usage_errors_with_encoded_output():
    for extra, word in [(["--size", "32"], "--size"), (["--augment", "hflip"], "--augment"),
                        (["--layout", "hwc"], "--layout"), (["--decode", "each"], "--decode"),
                        (["--jpeg-draft", "off"], "--jpeg-draft")]:
        r = subprocess.run([PRODUCER, "--measure", "1", "--generator", "images", "--images",
                            "/nonexistent", "--output", "encoded"] + extra,
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 2 and word + " applies to decoded output" in r.stderr, \
            (extra, r.returncode, r.stderr)
    r = subprocess.run([PRODUCER, "--measure", "1", "--generator", "images", "--images",
                        "/nonexistent", "--max-file-bytes", "1000"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "--max-file-bytes bounds --output encoded" in r.stderr, \
        r.stderr


run(globals())
