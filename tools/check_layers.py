#!/usr/bin/env python3
"""Checks that includes point down: engine/'s folders form layers (LAYERS, lowest first), kernels/ sit below
all of them but engine/base, and models/ above. A file may include its own layer or a lower one; exits 1
listing every include that points up."""
import pathlib
import re
import sys

# Lowest first. kernels/ may include engine/base only; engine may include kernels/.
LAYERS = ["engine/base", "kernels", "engine/graph", "engine/device", "engine/cuda", "engine/ops", "engine/plan",
          "engine/run", "engine/optim", "engine/dist", "engine/strategy", "engine/io", "engine/data",
          "engine/schedule", "engine/train", "models"]


def layer_of(path: str):
    best = None
    for i, name in enumerate(LAYERS):
        if path == name or path.startswith(name + "/"):
            if best is None or len(name) > len(LAYERS[best]):
                best = i
    return best


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    bad = []
    for f in sorted(root.glob("**/*")):
        rel = f.relative_to(root).as_posix()
        if f.suffix not in (".h", ".cc", ".cu", ".cuh") or layer_of(rel) is None:
            continue
        here = layer_of(rel)
        for n, line in enumerate(f.read_text().splitlines(), 1):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            there = layer_of(m.group(1))
            if there is not None and there > here:
                bad.append(f"{rel}:{n}: includes {m.group(1)} ({LAYERS[there]} is above {LAYERS[here]})")
    for b in bad:
        print(b)
    print(f"check_layers: {len(bad)} include(s) point up")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
