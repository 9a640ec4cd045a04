#!/usr/bin/python3
"""The images generator against torchvision + PIL on the same folder, side by side in one run.

Two pipelines, each written both ways (docs/images.md shows the correspondence):
  default  RandomResizedCrop(64), RandomHorizontalFlip, ColorJitter(0.4, 0.4), Normalize
           (stoker: no --augment, the built-in fast path without antialiasing)
  rich     RandomResizedCrop(64), RandomHorizontalFlip, ColorJitter(0.4, 0.4, 0.4, 0.1),
           RandomRotation(15, BILINEAR), Normalize
           (stoker: --augment 'rrc,hflip,jitter(b=0.4,c=0.4,s=0.4,h=0.1),rotate(15),normalize')
on PNG and JPEG copies of the same photo-like pictures, every file decoded for every example
(stoker --decode each; torchvision's ImageFolder always), as float32 (normalized) and uint8 (raw
pixels; the loop normalizes). Two figures for each:
  per core     examples per CPU-second of the generator alone (stoker-producer --measure's
               process CPU time; torchvision's dataset[i] in this process, one thread)
  end to end   examples/s into the same training loop (a linear model, batch 32): stoker with one
               producer and a broker through StokerIterableDataset, against DataLoader with one
               worker (the same number of processes making examples)
and the bytes each example moves. Short runs: this machine is shared; ratios are the figures.

    /usr/bin/python3 bench/images_tv.py [--files 64] [--examples 600] [--batches 40] [--json F]

Needs python3-torch, python3-torchvision, python3-pil (scripts/deps.sh). STOKER_BUILD (default
build/) gives the binaries and libstoker.so.
"""
import argparse
import json
import os
import resource
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

import torch  # noqa: E402
import torch.utils.data  # noqa: E402
import torchvision.transforms as T  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

from stoker.torch import StokerIterableDataset  # noqa: E402

PRODUCER = os.path.join(BUILD, "producer", "stoker-producer")
BROKER = os.path.join(BUILD, "server", "stoker-broker")
SIZE = 64
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
RICH = "rrc(0.08,1;0.75,1.33),hflip,jitter(b=0.4,c=0.4,s=0.4,h=0.1),rotate(15),normalize"


def tv_transform(pipeline, output):
    ops = [T.RandomResizedCrop(SIZE), T.RandomHorizontalFlip()]
    if pipeline == "default":
        ops.append(T.ColorJitter(0.4, 0.4))
    else:
        ops += [T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                T.RandomRotation(15, interpolation=T.InterpolationMode.BILINEAR)]
    if output == "float32":
        ops += [T.ToTensor(), T.Normalize(MEAN, STD)]
    else:
        ops.append(T.PILToTensor())
    return T.Compose(ops)


def stoker_args(pipeline, output):
    args = ["--size", str(SIZE), "--decode", "each", "--output", output]
    return args + (["--augment", RICH] if pipeline == "rich" else [])


def make_folders(tmp, files):
    png = os.path.join(tmp, "png")
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "make_images.py"), png, "4",
                    str(files // 4), "320", "240"], check=True, stdout=subprocess.DEVNULL)
    jpeg = os.path.join(tmp, "jpeg")
    for cls in sorted(os.listdir(png)):
        os.makedirs(os.path.join(jpeg, cls))
        for name in sorted(os.listdir(os.path.join(png, cls))):
            Image.open(os.path.join(png, cls, name)).convert("RGB").save(
                os.path.join(jpeg, cls, name[:-4] + ".jpg"), quality=90)
    return {"png": png, "jpeg": jpeg}


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def per_core_stoker(folder, pipeline, output, n):
    before = children_cpu()
    out = subprocess.run([PRODUCER, "--generator", "images", "--images", folder, "--measure",
                          str(n), "--log-level", "error"] + stoker_args(pipeline, output),
                         check=True, capture_output=True, text=True, timeout=600)
    cpu = children_cpu() - before
    assert json.loads(out.stdout.strip().splitlines()[-1])["examples"] == n
    return n / cpu


def per_core_tv(folder, pipeline, output, n):
    ds = ImageFolder(folder, transform=tv_transform(pipeline, output))
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(len(ds), (n,), generator=g).tolist()
    t0 = time.process_time()
    for i in idx:
        ds[i]
    return n / (time.process_time() - t0)


def train(loader, batches, output):
    """The same loop for both: normalize uint8 on this side, one SGD step per batch."""
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * SIZE * SIZE, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    n, nbytes, start = 0, 0, None
    for k, (x, y) in enumerate(loader):
        if k == 2:  # after start-up (processes, first files): the steady state
            start, n = time.monotonic(), 0
        if output == "uint8":
            x = (x.float() / 255 - mean) / std
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        n += y.shape[0]
        if k + 1 >= batches:
            break
    return n / (time.monotonic() - start)


class StokerLoader:
    """One producer and a broker feeding StokerIterableDataset; yields (image, label)."""

    def __init__(self, folder, pipeline, output):
        self.tmp = tempfile.mkdtemp(prefix="stoker-tvbench-")
        url = "ipc://" + os.path.join(self.tmp, "b.ipc")
        self.procs = [subprocess.Popen([BROKER, "--listen", url, "--queue-depth", "128",
                                        "--log-level", "error"], stdout=subprocess.DEVNULL)]
        self.procs.append(subprocess.Popen(
            [PRODUCER, "--broker", url, "--generator", "images", "--images", folder, "--chunk",
             "16", "--log-level", "error"] + stoker_args(pipeline, output)))
        self.ds = StokerIterableDataset(url, batch_size=32, stall_timeout=30)

    def __iter__(self):
        for b in torch.utils.data.DataLoader(self.ds, batch_size=None):
            yield b["image"], b["label"]

    def close(self):
        for p in reversed(self.procs):
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def end_to_end_stoker(folder, pipeline, output, batches):
    loader = StokerLoader(folder, pipeline, output)
    try:
        return train(loader, batches, output)
    finally:
        loader.close()


def end_to_end_tv(folder, pipeline, output, batches):
    ds = ImageFolder(folder, transform=tv_transform(pipeline, output))
    sampler = torch.utils.data.RandomSampler(ds, replacement=True, num_samples=32 * batches * 2)
    loader = torch.utils.data.DataLoader(ds, batch_size=32, sampler=sampler, num_workers=1)
    return train(loader, batches, output)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=64, help="pictures per format (320x240)")
    ap.add_argument("--examples", type=int, default=600, help="per-core examples per side")
    ap.add_argument("--batches", type=int, default=40, help="end-to-end batches of 32")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="stoker-tv-")
    rows, results = [], []
    try:
        folders = make_folders(tmp, args.files)
        for fmt in ("png", "jpeg"):
            for pipeline in ("default", "rich"):
                for output in ("float32", "uint8"):
                    f = folders[fmt]
                    s_core = per_core_stoker(f, pipeline, output, args.examples)
                    t_core = per_core_tv(f, pipeline, output, args.examples)
                    s_e2e = end_to_end_stoker(f, pipeline, output, args.batches)
                    t_e2e = end_to_end_tv(f, pipeline, output, args.batches)
                    nbytes = 3 * SIZE * SIZE * (4 if output == "float32" else 1) + 8
                    r = {"format": fmt, "pipeline": pipeline, "output": output,
                         "bytes_per_example": nbytes,
                         "per_core": {"stoker": s_core, "torchvision": t_core},
                         "end_to_end": {"stoker": s_e2e, "torchvision": t_e2e}}
                    results.append(r)
                    rows.append(r)
                    print("%-5s %-8s %-8s per core %7.0f vs %6.0f ex/CPU-s (%.2fx)   end to end "
                          "%6.0f vs %6.0f ex/s (%.2fx)   %d B/example"
                          % (fmt, pipeline, output, s_core, t_core, s_core / t_core, s_e2e,
                             t_e2e, s_e2e / t_e2e, nbytes), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
