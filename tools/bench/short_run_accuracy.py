#!/usr/bin/env python3
"""Short resnet20 runs: how much of the test-accuracy gap between Crumb and PyTorch is chaos.

compare.sh trains resnet20 for a few dozen steps, and the test accuracies it prints differ by tens of
points between Crumb and PyTorch. This script separates the causes. For each seed it writes PyTorch's
initial resnet20 to a safetensors file and trains, all on Crumb's sample order (its splitmix64
Fisher-Yates, ported below) with SGD lr 0.05 momentum 0.9:
  torch        PyTorch float32 from that initialisation
  torch+eps    the same with every weight tensor of 2+ dimensions scaled by 1 + eps and by 1 - eps
               (default 1e-6: perturbations of the size of float32 rounding)
  crumb        build/train --load <that file> --bn-group batch (PyTorch's BatchNorm semantics)
  crumb_own    build/train from its own initialisation (what compare.sh runs)
Every trained model is evaluated in PyTorch twice: with its running statistics (what both tools
report) and with the running statistics recomputed over the training images (momentum None), which
measures the weights alone. One JSON line per seed, then the means.

usage: tools/bench/short_run_accuracy.py [--train build/train] [--seeds 5] [--limit-train 4096]
         [--batch 128] [--threads 2] [--eps 1e-6]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # engine/graph/rng.h, kernels/dropout_mask.h


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def crumb_order(n, seed, epoch):
    """engine/data/loader.cc's shuffle: Rng(Rng(seed)() + epoch), Fisher-Yates from the end."""
    state = (seed + GOLDEN) & MASK
    state = (mix64(state) + epoch) & MASK
    order = list(range(n))
    for i in range(n, 1, -1):
        state = (state + GOLDEN) & MASK
        j = mix64(state) % i
        order[i - 1], order[j] = order[j], order[i - 1]
    return torch.tensor(order)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default=os.path.join(os.path.dirname(__file__), "../../build/train"))
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1")
    ap.add_argument("--limit-train", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eps", type=float, default=1e-6)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x_train, y_train = ref.load_split(ref.DEFAULT_DATA, "train", "cpu")
    x_train, y_train = x_train[:args.limit_train], y_train[:args.limit_train]
    x_test, y_test = ref.load_split(ref.DEFAULT_DATA, "t10k", "cpu")

    def scores(model):
        running = ref.evaluate(model, x_test, y_test)
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.reset_running_stats()
                    m.momentum = None  # a cumulative average: every batch counts the same
            model.train()
            for i in range(0, args.limit_train, args.batch):
                model(x_train[i:i + args.batch])
        return running, ref.evaluate(model, x_test, y_test)

    def from_file(path):
        model = ref.build_model("resnet20")
        model.load_state_dict(load_file(path), strict=True)
        return model

    def torch_run(init, seed, scale):
        model = from_file(init)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.mul_(scale)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()
        order = crumb_order(args.limit_train, seed, 0)
        for i in range(0, args.limit_train, args.batch):
            idx = order[i:i + args.batch]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x_train[idx]), y_train[idx]).backward()
            opt.step()
        return model

    def crumb_run(tmp, seed, extra):
        out = os.path.join(tmp, "crumb.safetensors")
        cmd = [args.train, "--model", "resnet20", "--batch", str(args.batch), "--limit-train", str(args.limit_train),
               "--lr", "0.05", "--momentum", "0.9", "--threads", str(args.threads), "--seed", str(seed),
               "--bn-group", "batch", "--save", out] + extra
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return from_file(out)

    variants = ("torch", f"torch+{args.eps:g}", f"torch-{args.eps:g}", "crumb", "crumb_own")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            torch.manual_seed(seed)
            init = os.path.join(tmp, "init.safetensors")
            save_file({k: v.contiguous() for k, v in ref.build_model("resnet20").state_dict().items()}, init)
            models = {
                variants[0]: torch_run(init, seed, 1.0),
                variants[1]: torch_run(init, seed, 1 + args.eps),
                variants[2]: torch_run(init, seed, 1 - args.eps),
                variants[3]: crumb_run(tmp, seed, ["--load", init]),
                variants[4]: crumb_run(tmp, seed, []),
            }
            row = {"seed": seed}
            for name, model in models.items():
                row[name], row[name + " recomputed"] = scores(model)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\nmean test accuracy over seeds 0-{args.seeds - 1} (resnet20, {args.limit_train} images, batch "
          f"{args.batch}, {args.limit_train // args.batch} steps)")
    print(f"{'variant':<14} {'running stats':>14} {'recomputed':>11}   per seed (running stats)")
    for name in variants:
        runs = [r[name] for r in rows]
        recomputed = sum(r[name + " recomputed"] for r in rows) / len(rows)
        print(f"{name:<14} {sum(runs) / len(runs):>14.4f} {recomputed:>11.4f}   " + " ".join(f"{a:.3f}" for a in runs))


if __name__ == "__main__":
    main()
