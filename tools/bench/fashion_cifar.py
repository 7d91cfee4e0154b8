#!/usr/bin/env python3
"""Writes Fashion-MNIST in CIFAR-10's binary format (a label byte + 3x32x32 bytes per record), so the
CIFAR-shaped models (resnet20 at 3x32x32, vgg11_bn) train on real images where CIFAR-10 itself cannot be
downloaded: each 28x28 image is padded by 2 zero pixels on every side and repeated in the 3 channels.
Files: data_batch_1.bin .. data_batch_5.bin (12000 training records each), test_batch.bin (10000).

usage: tools/bench/fashion_cifar.py OUT_DIR [--data FASHION_MNIST_DIR]
"""
import argparse
import gzip
import os
import struct

import numpy as np


def idx(path, magic):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    got, n = struct.unpack(">II", raw[:8])
    if got != magic:
        raise SystemExit(f"fashion_cifar.py: {path} is not an IDX file (magic {got:#x}, expected {magic:#x})")
    header = 16 if magic == 0x803 else 8
    a = np.frombuffer(raw, dtype=np.uint8, offset=header)
    if a.size != n * (784 if magic == 0x803 else 1):
        raise SystemExit(f"fashion_cifar.py: {path} holds {a.size} bytes for {n} records (truncated?)")
    return a.reshape(n, 28, 28) if magic == 0x803 else a


def records(images, labels):
    padded = np.zeros((len(images), 32, 32), dtype=np.uint8)
    padded[:, 2:30, 2:30] = images
    out = np.empty((len(images), 3073), dtype=np.uint8)
    out[:, 0] = labels
    out[:, 1:] = np.repeat(padded[:, None], 3, axis=1).reshape(len(images), -1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--data", default=os.environ.get("CRUMB_DATA", "/usr/share/datasets/fashion-mnist"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for split, files in (("train", [f"data_batch_{i}.bin" for i in range(1, 6)]), ("t10k", ["test_batch.bin"])):
        recs = records(idx(f"{a.data}/{split}-images-idx3-ubyte.gz", 0x803),
                       idx(f"{a.data}/{split}-labels-idx1-ubyte.gz", 0x801))
        for name, part in zip(files, np.array_split(recs, len(files))):
            part.tofile(os.path.join(a.out, name))
    print(f"fashion_cifar.py: wrote {a.out}")


if __name__ == "__main__":
    main()
