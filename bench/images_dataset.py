#!/usr/bin/python3
"""A dataset of small images from a cold start: stoker's `images --dataset` producers against
torchvision's ImageFolder + DataLoader(num_workers=P), same folder, same augmentation, same loop.

The folder is Fashion-MNIST's shape: FILES grayscale PNGs of 28x28 in 10 class folders (made here
once and kept under /tmp: 60,000 by default). Each side trains one epoch (every file once) with
the same loop (a linear model on 3x28x28, batches of 64, one SGD step each) and the same
augmentation: RandomResizedCrop(28), RandomHorizontalFlip, ColorJitter(0.4, 0.4), Normalize
(stoker: its default pipeline, --size 28). stoker: a broker with --dataset-size FILES --epochs 1,
P producers `--generator images --images DIR --dataset` with every other default; the clock
starts as the producers start (the client connects once the first says hello). torchvision: the
clock starts before ImageFolder scans the folder. Two figures per side:
  first batch  seconds from the start to the loop's first batch
  images/s     the epoch's images over the time from the start to its last batch
Rounds alternate which side runs first; ratios per round, medians over the rounds.

    /usr/bin/python3 bench/images_dataset.py [--files 60000] [--producers 2] [--rounds 3]
                                             [--json F]

Needs python3-torch, python3-torchvision, python3-pil (scripts/deps.sh bench). STOKER_BUILD
(default build/) gives the binaries and libstoker.so.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import warnings
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("STOKER_BUILD", "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("STOKER_LIB", os.path.join(BUILD, "common", "libstoker.so"))

import stoker  # noqa: E402
import torch  # noqa: E402
import torch.utils.data  # noqa: E402
import torchvision.transforms as T  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

PRODUCER = os.path.join(BUILD, "producer", "stoker-producer")
BROKER = os.path.join(BUILD, "server", "stoker-broker")
SIDE, CLASSES, BATCH = 28, 10, 64
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def gray_png(seed):
    """A 28x28 grayscale PNG with a pattern and noise of its own (a real, small decode)."""
    x = seed * 2654435761 & 0xFFFFFFFF
    rows = []
    for y in range(SIDE):
        row = bytearray([0])
        for i in range(SIDE):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
            row.append((i * (seed % 7 + 1) + y * 3 + (x >> 16) % 48) & 255)
        rows.append(bytes(row))

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", SIDE, SIDE, 8, 0, 0,
                                                               0, 0))
            + chunk(b"IDAT", zlib.compress(b"".join(rows), 6)) + chunk(b"IEND", b""))


def make_folder(files):
    """FILES PNGs in CLASSES folders under /tmp, made once (a marker names a complete one)."""
    root = "/tmp/stoker-bench-images-%d" % files
    if os.path.exists(os.path.join(root, ".complete")):
        return root
    shutil.rmtree(root, ignore_errors=True)
    pngs = [gray_png(s) for s in range(256)]
    for i in range(files):
        d = os.path.join(root, "class%d" % (i % CLASSES))
        if i < CLASSES:
            os.makedirs(d)
        with open(os.path.join(d, "img%05d.png" % i), "wb") as f:
            f.write(pngs[i % len(pngs)])
    open(os.path.join(root, ".complete"), "w").close()
    return root


class Loop:
    """The training loop both sides feed: times the first and the last batch from start."""

    def __init__(self, start):
        self.model = torch.nn.Sequential(torch.nn.Flatten(),
                                         torch.nn.Linear(3 * SIDE * SIDE, CLASSES))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.start, self.first, self.images = start, None, 0

    def step(self, x, y):
        if self.first is None:
            self.first = time.monotonic() - self.start
        loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.images += int(y.shape[0])

    def result(self):
        return {"first_batch_s": self.first, "images": self.images,
                "images_per_s": self.images / (time.monotonic() - self.start)}


def run_stoker(folder, files, producers):
    tmp = tempfile.mkdtemp(prefix="stoker-imgds-")
    url = "ipc://" + os.path.join(tmp, "b.ipc")
    procs = [subprocess.Popen([BROKER, "--listen", url, "--dataset-size", str(files), "--epochs",
                               "1", "--log-level", "error"], stdout=subprocess.DEVNULL)]
    try:
        client = stoker.Client(url, stall_timeout=30)  # it connects once a producer said hello
        start = time.monotonic()
        for _ in range(producers):
            procs.append(subprocess.Popen(
                [PRODUCER, "--broker", url, "--generator", "images", "--images", folder,
                 "--dataset", "--size", str(SIDE), "--log-level", "error"],
                stdout=subprocess.DEVNULL))
        loop = Loop(start)
        for epoch in client.epochs(1, batch_size=BATCH):
            for b in epoch:
                loop.step(torch.from_numpy(b["image"]), torch.from_numpy(b["label"]))
        out = loop.result()
        client.close()
        assert out["images"] == files, "stoker delivered %d of %d" % (out["images"], files)
        return out
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def run_torchvision(folder, files, workers):
    start = time.monotonic()
    ds = ImageFolder(folder, transform=T.Compose([
        T.RandomResizedCrop(SIDE), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4),
        T.ToTensor(), T.Normalize(MEAN, STD)]))
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers)
    loop = Loop(start)
    for x, y in loader:
        loop.step(x, y)
    out = loop.result()
    assert out["images"] == files, "torchvision delivered %d of %d" % (out["images"], files)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=60000, help="PNGs of 28x28 in the folder")
    ap.add_argument("--producers", type=int, default=2,
                    help="stoker's producers, and DataLoader's num_workers")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, the order turned each")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    # The batch's arrays are the library's, read-only: torch warns once that it will not write.
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    folder = make_folder(args.files)
    rounds = []
    for k in range(args.rounds):
        sides = [("stoker", lambda: run_stoker(folder, args.files, args.producers)),
                 ("torchvision", lambda: run_torchvision(folder, args.files, args.producers))]
        if k % 2:
            sides.reverse()
        r = {name: fn() for name, fn in sides}
        r["ratio"] = r["stoker"]["images_per_s"] / r["torchvision"]["images_per_s"]
        rounds.append(r)
        print("round %d: first batch stoker %.2f s, torchvision %.2f s; images/s stoker %.0f, "
              "torchvision %.0f (%.2fx)" % (k + 1, r["stoker"]["first_batch_s"],
                                             r["torchvision"]["first_batch_s"],
                                             r["stoker"]["images_per_s"],
                                             r["torchvision"]["images_per_s"], r["ratio"]),
              flush=True)
    summary = {
        "files": args.files, "producers": args.producers, "rounds": rounds,
        "first_batch_s": {s: statistics.median(r[s]["first_batch_s"] for r in rounds)
                          for s in ("stoker", "torchvision")},
        "images_per_s": {s: statistics.median(r[s]["images_per_s"] for r in rounds)
                         for s in ("stoker", "torchvision")},
        "ratio": statistics.median(r["ratio"] for r in rounds)}
    print("median: first batch stoker %.2f s, torchvision %.2f s; images/s stoker / torchvision "
          "%.2f" % (summary["first_batch_s"]["stoker"], summary["first_batch_s"]["torchvision"],
                    summary["ratio"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
