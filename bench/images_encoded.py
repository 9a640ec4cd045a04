#!/usr/bin/python3
"""images --output encoded against decoded output from the same JPEG files, side by side in one
run. Three ways to make an example of a folder of 320x240 JPEGs (quality 90):
  encoded       --output encoded: the file's bytes as they are (decoding left to the consumer,
                e.g. torchvision.io.decode_jpeg on the GPU)
  decode each   --output uint8 --decode each: read and decode the file, default pipeline to
                64x64 (what a data loader does)
  decode once   --output uint8: pixels decoded at start, default pipeline to 64x64
Two figures for each:
  per core     examples per CPU-second of the generator alone (stoker-producer --measure's
               process CPU time)
  end to end   examples/s into a Python loop (stoker.Client, batch 64) from one producer and a
               broker; for encoded also with the loop decoding every file on its CPU
               (torchvision.io.decode_jpeg), the cost that moves to the consumer without a GPU
and the bytes an example moves. Short runs: the machine is shared; ratios are the figures.

    /usr/bin/python3 bench/images_encoded.py [--files 64] [--examples 20000] [--json F]

Needs python3-pil (and python3-torchvision for the decoding loop). STOKER_BUILD (default
build/) gives the binaries and libstoker.so.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("STOKER_BUILD", "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("STOKER_LIB", os.path.join(BUILD, "common", "libstoker.so"))

from PIL import Image  # noqa: E402

import stoker  # noqa: E402

PRODUCER = os.path.join(BUILD, "producer", "stoker-producer")
BROKER = os.path.join(BUILD, "server", "stoker-broker")
WAYS = {
    "encoded": ["--output", "encoded"],
    "decode each": ["--output", "uint8", "--decode", "each"],
    "decode once": ["--output", "uint8"],
}


def make_folder(tmp, files):
    png = os.path.join(tmp, "png")
    subprocess.run([sys.executable, os.path.join(ROOT, "bench", "make_images.py"), png, "4",
                    str(files // 4), "320", "240"], check=True, stdout=subprocess.DEVNULL)
    jpeg = os.path.join(tmp, "jpeg")
    for cls in sorted(os.listdir(png)):
        os.makedirs(os.path.join(jpeg, cls))
        for name in sorted(os.listdir(os.path.join(png, cls))):
            Image.open(os.path.join(png, cls, name)).convert("RGB").save(
                os.path.join(jpeg, cls, name[:-4] + ".jpg"), quality=90)
    return jpeg


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def per_core(folder, args, n):
    before = children_cpu()
    out = subprocess.run([PRODUCER, "--generator", "images", "--images", folder, "--measure",
                          str(n), "--log-level", "error"] + args,
                         check=True, capture_output=True, text=True, timeout=600)
    assert json.loads(out.stdout.strip().splitlines()[-1])["examples"] == n
    return n / (children_cpu() - before)


def end_to_end(tmp, folder, args, n, decode=None):
    """examples/s into a loop pulling batches of 64 (decode: what the loop does with each
    encoded file), timed from the first batch; and the bytes an example moves."""
    url = "ipc://" + os.path.join(tmp, "b.ipc")
    broker = subprocess.Popen([BROKER, "--listen", url, "--log-level", "error"],
                              stdout=subprocess.DEVNULL)
    prod = None
    try:
        for _ in range(200):
            try:
                stoker.status(url, timeout=0.2)
                break
            except stoker.StokerError:
                time.sleep(0.02)
        prod = subprocess.Popen([PRODUCER, "--broker", url, "--generator", "images", "--images",
                                 folder, "--log-level", "error"] + args)
        got, nbytes, start = 0, 0, None
        with stoker.Client(url, batch_size=64, stall_timeout=20) as client:
            for b in client.batches():
                if start is None:
                    start = time.monotonic()
                    continue
                image = b["image"]
                if isinstance(image, stoker.Ragged):
                    nbytes += len(image.values) + 8 * len(image)
                    if decode is not None:
                        decode(image)
                else:
                    nbytes += image.nbytes
                got += len(b["label"])
                if got >= n:
                    break
        return got / (time.monotonic() - start), nbytes / got
    finally:
        for p in (prod, broker):
            if p is not None:
                p.kill()
                p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--examples", type=int, default=20000)
    ap.add_argument("--json")
    opts = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="stoker-bench-enc-")
    try:
        folder = make_folder(tmp, opts.files)
        sizes = [os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(folder)
                 for f in fs]
        res = {"files": len(sizes), "mean_file_bytes": sum(sizes) / len(sizes), "ways": {}}
        for way, args in WAYS.items():
            core = per_core(folder, args, opts.examples if way != "decode each"
                            else opts.examples // 10)
            rate, per = end_to_end(tmp, folder, args, opts.examples)
            res["ways"][way] = {"per_core": core, "end_to_end": rate, "bytes": per}
        try:
            import torch
            from torchvision.io import decode_jpeg

            def decode(image):
                t = torch.from_numpy(image.values.copy())
                off = image.offsets.tolist()
                for i in range(len(image)):
                    decode_jpeg(t[off[i]:off[i + 1]])
            torch.set_num_threads(1)
            rate, per = end_to_end(tmp, folder, WAYS["encoded"], opts.examples // 10, decode)
            res["ways"]["encoded + decode_jpeg in the loop (CPU)"] = {"end_to_end": rate,
                                                                      "bytes": per}
        except ImportError as e:
            print("torchvision missing (%s): no decoding loop" % e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d JPEGs of 320x240, %.0f bytes on average" % (res["files"], res["mean_file_bytes"]))
    print("%-42s %12s %12s %10s" % ("way", "per core", "end to end", "bytes/ex"))
    for way, r in res["ways"].items():
        print("%-42s %12s %12.0f %10.0f" % (way, "%.0f" % r["per_core"] if "per_core" in r
                                           else "-", r["end_to_end"], r["bytes"]))
    enc, each = res["ways"]["encoded"], res["ways"]["decode each"]
    print("encoded / decode each: per core %.1fx, end to end %.1fx" %
          (enc["per_core"] / each["per_core"], enc["end_to_end"] / each["end_to_end"]))
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
