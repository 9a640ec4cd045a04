"""An images producer serving a dataset (--generator images --dataset, --decode once) starts at
once: it checks only the files' headers at start and decodes each file when a shard it is handed
first needs it (then holds it), so the first batch does not wait for the whole folder to be
decoded; every item still comes once, with its class's label."""

import os
import struct
import subprocess
import time
import zlib

from helpers import PRODUCER, Cluster, require, run

require("numpy")
import stoker  # noqa: E402

FILES = 3000
CLASSES = 3
SIDE = 160  # 160x160 noise: each file costs a real decode (its pixels barely compress)


def png_bytes(seed):
    rows = []
    for y in range(SIDE):
        rows.append(b"\0" + bytes((x * 7 + y * 13 + seed * 31 + (x * y) % 11) & 255
                                  for x in range(SIDE * 3)))
    raw = zlib.compress(b"".join(rows), 1)

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", SIDE, SIDE, 8, 2, 0,
                                                               0, 0))
            + chunk(b"IDAT", raw) + chunk(b"IEND", b""))


def make_folder(root):
    """FILES PNGs in CLASSES class folders: a few distinct images, copied."""
    images = [png_bytes(s) for s in range(4)]
    for i in range(FILES):
        d = os.path.join(root, "class%d" % (i % CLASSES))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "img%05d.png" % i), "wb") as f:
            f.write(images[i % len(images)])


def test_a_dataset_of_images_starts_before_the_folder_is_decoded():
    with Cluster("--dataset-size", str(FILES), "--epochs", "1") as c:
        root = os.path.join(c.dir, "images")
        make_folder(root)
        with stoker.Client(c.url, stall_timeout=20) as client:
            start = time.monotonic()
            c.producer("--generator", "images", "--images", root, "--dataset", "--size", "16",
                       "--output", "uint8")
            first, labels = None, {}
            for epoch in client.epochs(1, batch_size=32):
                for batch in epoch:
                    if first is None:
                        first = time.monotonic() - start
                    _, idx = batch.epoch_indices()
                    for i, label in zip(idx.tolist(), batch["label"].tolist()):
                        labels[i] = label
            total = time.monotonic() - start
    print("first batch %.3f s after the producer's start; the epoch of %d files %.3f s"
          % (first, FILES, total))
    assert sorted(labels) == list(range(FILES)), len(labels)
    # The listing is sorted by class, then name: item i is file i of its class.
    per_class = FILES // CLASSES
    assert all(labels[i] == i // per_class for i in range(FILES)), "labels off their classes"
    # Decoding the whole folder first made the first batch wait for nearly the whole epoch (the
    # rest is cheap: 16x16 outputs); decoded when used, it waits for one shard's files.
    assert first < 0.4 * total, "first batch after %.3f s of an epoch of %.3f s" % (first, total)


def test_a_dataset_producer_opens_no_file_at_start_and_names_a_bad_one_when_used():
    """--dataset lists the folder only (no file opened at start): a file that is not an image
    counts among the items, is named when its first example is made, and its item is made from
    another image; every item still comes once."""
    n = 40
    with Cluster("--dataset-size", str(n), "--epochs", "1") as c:
        root = os.path.join(c.dir, "images")
        pngs = [png_bytes(s) for s in range(2)]
        for i in range(n):
            d = os.path.join(root, "class%d" % (i % 2))
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "img%02d.png" % i), "wb") as f:
                f.write(b"not a png at all" if i == 7 else pngs[i % 2])
        log = os.path.join(c.dir, "producer.log")
        with open(log, "w") as err, stoker.Client(c.url, stall_timeout=20) as client:
            p = subprocess.Popen([PRODUCER, "--broker", c.url, "--generator", "images",
                                  "--images", root, "--dataset", "--size", "8", "--output",
                                  "uint8", "--log-level", "info"], stderr=err)
            c.producers.append(p)
            seen = []
            for epoch in client.epochs(1, batch_size=8):
                for batch in epoch:
                    seen += batch.epoch_indices()[1].tolist()
        assert sorted(seen) == list(range(n)), seen
        with open(log) as f:
            text = f.read()
        assert "%d images (listed;" % n in text, text
        assert "class1/img07.png" in text and "skipping this file" in text, text


run(globals())
