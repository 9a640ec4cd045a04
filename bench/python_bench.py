#!/usr/bin/python3
"""examples/s into a PyTorch training loop: through stoker (2 synthetic producers, a broker,
stoker.torch.StokerIterableDataset) against torch.utils.data.DataLoader(num_workers=2) whose
workers generate the same synthetic workload in Python, in the same run, with the same model and
batch size. Each example costs a random pause uniform in --delay MIN:MAX seconds (the synthetic
generator's cost) plus the reference target function, so both sides have the same ideal rate:
2 / mean(delay) examples/s.

    /usr/bin/python3 bench/python_bench.py [--delay 0.005:0.05] [--seconds 15] [--batch-size 4]
    /usr/bin/python3 bench/python_bench.py --large [--seconds 15]

--large: 150,528-byte examples (224x224x3 uint8 images), batch 32, generation free on both sides
(stoker-bench-producer --fill stamp writes only each example's seq; DataLoader workers yield a
ready image), MB/s into the same loop; on the
broker's host stoker's producers push by reference (their examples in shared memory the broker
maps) and its batches come through the broker's shared memory (STOKER_SHM=0: both over sockets).

Uses STOKER_BUILD (default build/) for the broker, the producer and libstoker.so. Needs numpy and
torch (Debian: python3-numpy python3-torch).
"""
import argparse
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("STOKER_BUILD", "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("STOKER_LIB", os.path.join(BUILD, "common", "libstoker.so"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.utils.data  # noqa: E402

import stoker  # noqa: E402
from stoker.torch import StokerIterableDataset  # noqa: E402


def synthetic_example(rng, delay_min, delay_max):
    """The reference workload (common/include/stoker/synthetic.h), in Python."""
    time.sleep(rng.uniform(delay_min, delay_max))
    x = np.array([rng.random() for _ in range(10)], dtype=np.float32)
    y = (math.sin(2 * math.pi * x[0]) * x[1] + (x[2] - x[3]) ** 2 + 0.5 * x[4] * x[5]
         - 0.25 * (x[6] + x[7] + x[8] + x[9]) + 0.01 * rng.gauss(0, 1))
    return {"input": torch.from_numpy(x), "output": torch.tensor([y], dtype=torch.float32)}


class SyntheticDataset(torch.utils.data.IterableDataset):
    def __init__(self, delay_min, delay_max):
        super().__init__()
        self.delay_min, self.delay_max = delay_min, delay_max

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        rng = random.Random(1000 + (info.id if info is not None else 0))
        while True:
            yield synthetic_example(rng, self.delay_min, self.delay_max)


def train(loader, seconds):
    """Trains a small MLP on loader's batches for `seconds` from the first batch; returns
    (examples/s, examples, final loss)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = None
    examples = 0
    loss = float("nan")
    for batch in loader:
        x, y = batch["input"], batch["output"]
        loss_t = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss_t.backward()
        opt.step()
        loss = loss_t.item()
        now = time.monotonic()
        if start is None:
            start = now  # steady state: from the first batch, as the other benchmarks
            continue
        examples += x.shape[0]
        if now - start >= seconds:
            break
    elapsed = time.monotonic() - start
    return examples / elapsed, examples, loss


IMAGE = (224, 224, 3)
IMAGE_BYTES = 224 * 224 * 3


class ImageDataset(torch.utils.data.IterableDataset):
    """Generation free: yields the same ready image (the DataLoader's collate copies it into the
    batch and its worker hands the batch over in shared memory)."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        img = torch.from_numpy(np.full(IMAGE, (info.id if info is not None else 0) + 1,
                                       dtype=np.uint8))
        while True:
            yield {"image": img}


def train_large(loader, seconds, device="cpu"):
    """The loop for --large: a linear model on every 64th byte of each image (every byte of the
    batch is read once by the strided float conversion's source pages; with --device cuda the
    whole uint8 batch is uploaded first, as a GPU loop does). Returns (MB/s, examples, loss)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(IMAGE_BYTES // 64, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    start, examples, loss = None, 0, float("nan")
    for batch in loader:
        x = batch["image"].to(device, non_blocking=True)
        x = x.reshape(x.shape[0], -1)
        feats = x[:, ::64].float()
        loss_t = model(feats).pow(2).mean()
        opt.zero_grad()
        loss_t.backward()
        opt.step()
        loss = loss_t.item()
        now = time.monotonic()
        if start is None:
            start = now
            continue
        examples += x.shape[0]
        if now - start >= seconds:
            break
    elapsed = time.monotonic() - start
    return examples * IMAGE_BYTES / elapsed / 1e6, examples, loss


def run_stoker_large(args):
    tmp = tempfile.mkdtemp(prefix="stoker-pybench-")
    url = "ipc://" + os.path.join(tmp, "broker.ipc")
    procs = [subprocess.Popen([os.path.join(BUILD, "server", "stoker-broker"), "--listen", url,
                               "--queue-depth", "256", "--max-message", "268435456",
                               "--log-level", "error"], stdout=subprocess.DEVNULL)]
    try:
        for i in range(args.producers):
            procs.append(subprocess.Popen([
                os.path.join(BUILD, "bench", "stoker-bench-producer"), "--broker", url,
                "--schema", "image:uint8[224,224,3]", "--chunk", "32", "--fill", "stamp",
                "--name", "b%d" % i]))
        ds = StokerIterableDataset(url, batch_size=32, stall_timeout=10)
        loader = torch.utils.data.DataLoader(ds, batch_size=None)
        return train_large(loader, args.seconds, args.device)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main_large(args):
    torch.set_num_threads(1)
    s_rate, s_n, _ = run_stoker_large(args)
    # On a GPU, what a PyTorch user writes: pinned batches, uploaded without blocking.
    loader = torch.utils.data.DataLoader(ImageDataset(), batch_size=32,
                                         num_workers=args.producers,
                                         pin_memory=args.device != "cpu")
    d_rate, d_n, _ = train_large(loader, args.seconds, args.device)
    print("150,528-byte examples, batch 32, generation free, %d producers / workers, loop on %s"
          % (args.producers, args.device))
    print("%-34s %10s %9s" % ("", "MB/s", "examples"))
    print("%-34s %10.1f %9d" % ("stoker (%d producers, %s)" % (
        args.producers, "socket" if os.environ.get("STOKER_SHM") == "0" else "shm"), s_rate, s_n))
    print("%-34s %10.1f %9d" % ("DataLoader(num_workers=%d)" % args.producers, d_rate, d_n))
    print("ratio stoker / DataLoader: %.3f (target >= 1.5)" % (s_rate / d_rate))


def run_stoker(args, lo, hi):
    tmp = tempfile.mkdtemp(prefix="stoker-pybench-")
    url = "ipc://" + os.path.join(tmp, "broker.ipc")
    procs = [subprocess.Popen([os.path.join(BUILD, "server", "stoker-broker"), "--listen", url,
                               # queues that together hold less than a batch make every batch
                               # short (the broker answers once they are all full)
                               "--queue-depth", str(max(64, 4 * args.batch_size)),
                               "--log-level", "error"], stdout=subprocess.DEVNULL)]
    try:
        for i in range(args.producers):
            procs.append(subprocess.Popen([
                os.path.join(BUILD, "producer", "stoker-producer"), "--broker", url,
                "--name", "bench-%d" % i, "--seed", str(i + 1), "--delay", "%g:%g" % (lo, hi),
                "--chunk", str(1 if hi > 0 else 64), "--log-level", "error"]))
        ds = StokerIterableDataset(url, batch_size=args.batch_size, stall_timeout=10)
        loader = torch.utils.data.DataLoader(ds, batch_size=None)
        return train(loader, args.seconds)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def run_dataloader(args, lo, hi):
    loader = torch.utils.data.DataLoader(SyntheticDataset(lo, hi), batch_size=args.batch_size,
                                         num_workers=args.producers)
    return train(loader, args.seconds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay", default="0.005:0.05", help="MIN:MAX seconds per example")
    ap.add_argument("--seconds", type=float, default=15, help="measured seconds per side")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--producers", type=int, default=2,
                    help="stoker producers and DataLoader workers (default 2)")
    ap.add_argument("--large", action="store_true",
                    help="150 KB examples, batch 32, generation free, MB/s")
    ap.add_argument("--device", default="cpu",
                    help="--large: where the loop trains, cpu or cuda (batches uploaded to it)")
    args = ap.parse_args()
    if args.large:
        return main_large(args)
    lo, hi = (float(v) for v in args.delay.split(":"))
    torch.set_num_threads(1)
    ideal = args.producers / ((lo + hi) / 2) if hi > 0 else float("inf")
    print("workload: delay %g:%g s per example, batch %d, %d producers / workers; ideal %.1f "
          # (inf when generation costs nothing: then it measures the pipes' overhead)
          "examples/s" % (lo, hi, args.batch_size, args.producers, ideal))
    s_rate, s_n, s_loss = run_stoker(args, lo, hi)
    d_rate, d_n, d_loss = run_dataloader(args, lo, hi)
    print("%-34s %10s %9s %10s %8s" % ("", "examples/s", "examples", "of ideal", "loss"))
    print("%-34s %10.1f %9d %9.1f%% %8.4f" % ("stoker (%d producers)" % args.producers, s_rate,
                                              s_n, 100 * s_rate / ideal, s_loss))
    print("%-34s %10.1f %9d %9.1f%% %8.4f" % ("DataLoader(num_workers=%d)" % args.producers,
                                              d_rate, d_n, 100 * d_rate / ideal, d_loss))
    print("ratio stoker / DataLoader: %.3f" % (s_rate / d_rate))


if __name__ == "__main__":
    main()
