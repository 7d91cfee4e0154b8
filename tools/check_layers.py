#!/usr/bin/env python3
"""Checks that the layers point down: engine/'s folders form layers (LAYERS, lowest first), kernels/ sit below
all of them but engine/base, and models/ above. A file may include its own layer or a lower one, and LAYERS
names exactly the folders there are. With --objects BUILD_DIR it also reads the compiled objects (nm): an
object may use only symbols defined in its own layer or a lower one, which catches what includes cannot
(a lower layer declaring with `extern`, or a header of one layer whose functions another defines). Exits 1
listing every link that points up."""
import argparse
import pathlib
import re
import subprocess
import sys

# Lowest first. kernels/ may include engine/base only; engine may include kernels/.
LAYERS = ["engine/base", "kernels", "engine/graph", "engine/device", "engine/cuda", "engine/ops", "engine/plan",
          "engine/run", "engine/optim", "engine/dist", "engine/strategy", "engine/io", "engine/data",
          "engine/train", "models"]


def layer_of(path: str):
    best = None
    for i, name in enumerate(LAYERS):
        if path == name or path.startswith(name + "/"):
            if best is None or len(name) > len(LAYERS[best]):
                best = i
    return best


def folder_mismatch(root: pathlib.Path):
    """LAYERS against the folders: engine/'s, kernels and models."""
    folders = {"kernels", "models"} | {f"engine/{d.name}" for d in (root / "engine").iterdir() if d.is_dir()}
    return ([f"LAYERS names {name}, which is not a folder" for name in LAYERS if name not in folders] +
            [f"{name} is a folder LAYERS does not name" for name in sorted(folders - set(LAYERS))])


def nm(obj: pathlib.Path, *flags):
    out = subprocess.run(["nm", "--no-sort", *flags, str(obj)], check=True, capture_output=True, text=True).stdout
    return [line.split()[-2:] for line in out.splitlines() if line.strip()]


def symbols_pointing_up(root: pathlib.Path, build: pathlib.Path):
    """Every object under BUILD_DIR/CMakeFiles/<target>.dir/<source path>.o that uses a symbol which only
    objects of higher layers define. Only strong definitions count (code, data, read-only data): weak ones
    (inline functions, template instances) are copies any object may hold."""
    objects = {}
    for o in sorted(build.glob("CMakeFiles/*.dir/**/*.o")):
        rel = o.relative_to(build / "CMakeFiles").as_posix().split("/", 1)[1]
        source = rel[:-2]  # engine/graph/graph.cc.o -> engine/graph/graph.cc
        if layer_of(source) is not None and (root / source).exists():  # not a removed file's leftover
            objects[o] = source
    defined = {}
    for o, source in objects.items():
        for kind, sym in nm(o, "--defined-only"):
            if kind in "TDBR":
                defined.setdefault(sym, set()).add(layer_of(source))
    bad = []
    for o, source in objects.items():
        here = layer_of(source)
        for _, sym in nm(o, "--undefined-only"):
            layers = defined.get(sym)
            if layers and min(layers) > here:
                name = subprocess.run(["c++filt", sym], capture_output=True, text=True).stdout.strip()
                bad.append(f"{source}: uses {name}, defined in {LAYERS[min(layers)]} (above {LAYERS[here]})")
    return bad, len(objects)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--objects", type=pathlib.Path, help="a build folder whose objects to check as well")
    args = ap.parse_args()
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
    folders = folder_mismatch(root)
    symbols = []
    if args.objects:
        symbols, count = symbols_pointing_up(root, args.objects.resolve())
        if count == 0:
            symbols = [f"no object files of the layers under {args.objects}/CMakeFiles (build first)"]
    for b in bad + folders + symbols:
        print(b)
    print(f"check_layers: {len(bad)} include(s) point up" + (f", {len(folders)} folder(s) differ from LAYERS" if folders else "")
          + (f", {len(symbols)} symbol use(s) point up" if args.objects else ""))
    return 1 if bad or folders or symbols else 0


if __name__ == "__main__":
    sys.exit(main())
