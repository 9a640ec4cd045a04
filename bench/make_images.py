#!/usr/bin/env python3
"""Writes a small folder of PNG images for the images benchmark (stdlib only: zlib + struct),
one subfolder per class: make_images.py DIR [CLASSES] [PER_CLASS] [WIDTH HEIGHT]. Images are RGB
(320x240 by default) with smooth gradients and noise, so decoding and augmentation do real
work."""
import os
import random
import struct
import sys
import zlib


def png(path, width, height, seed):
    rng = random.Random(seed)
    a, b, c = rng.random() * 6, rng.random() * 6, rng.random() * 6
    rows = []
    for y in range(height):
        row = bytearray([0])  # filter: none
        for x in range(width):
            n = rng.randrange(24)
            row += bytes(((int(x * a + y) + n) & 255, (int(y * b + x) + n) & 255,
                          (int((x + y) * c) + n) & 255))
        rows.append(bytes(row))
    raw = zlib.compress(b"".join(rows), 6)

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n")
        f.write(chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))
        f.write(chunk(b"IDAT", raw))
        f.write(chunk(b"IEND", b""))


def main():
    root = sys.argv[1]
    classes = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    per = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    width = int(sys.argv[4]) if len(sys.argv) > 4 else 320
    height = int(sys.argv[5]) if len(sys.argv) > 5 else 240
    for k in range(classes):
        d = os.path.join(root, f"class{k}")
        os.makedirs(d, exist_ok=True)
        for i in range(per):
            png(os.path.join(d, f"img{i}.png"), width, height, k * 1000 + i)


if __name__ == "__main__":
    main()
