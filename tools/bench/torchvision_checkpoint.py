#!/usr/bin/env python3
"""Checkpoints cross between Crumb and torchvision both ways, strictly.

1. Crumb trains resnet18 briefly on Fashion-MNIST and --saves; PyTorch loads the file with
   safetensors.torch.load_file + load_state_dict(strict=True) into torchvision's resnet18 (conv1 for
   one input channel) and evaluates it in eval mode on the same test images: its accuracy and mean
   loss must be Crumb's (the running statistics and every weight came across).
2. torchvision's resnet18 (random weights, running statistics moved by a few training-mode forwards)
   is saved with safetensors.torch.save_file; Crumb --load's it with --epochs 0 (evaluate only): both
   must agree again.
Accuracies may differ by one test image at most (float32 ties in the argmax), mean test losses by 1e-4
relative (float32 rounding).

Usage: tools/bench/torchvision_checkpoint.py [--train build/train] [--data DIR]
Exit 0 when both directions agree, 1 otherwise, 77 when torch/torchvision/safetensors are missing.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torchvision
    from safetensors.torch import load_file, save_file
    from torch import nn
except ImportError as e:  # CTest's SKIP_RETURN_CODE
    print(f"skipped: {e}", file=sys.stderr)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import DEFAULT_DATA, load_split  # noqa: E402

LIMIT_TEST = 512


def torchvision_resnet18():
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)  # same name and init
    return model


def evaluate(model, x, y):
    """Test accuracy and mean cross-entropy in eval mode (running statistics)."""
    model.eval()
    with torch.no_grad():
        logits = model(x)
        return (logits.argmax(1) == y).double().mean().item(), nn.functional.cross_entropy(logits, y).item()


def agree(name_a, a, name_b, b):
    """Accuracies within one test image, mean losses within float32 rounding."""
    ok = abs(a[0] - b[0]) <= 1.0 / LIMIT_TEST + 1e-9 and abs(a[1] - b[1]) <= 1e-4 * abs(b[1])
    print(f"  test accuracy {name_a} {a[0]:.4f}, {name_b} {b[0]:.4f}; test loss {name_a} {a[1]:.6f}, "
          f"{name_b} {b[1]:.6f}: {'agree' if ok else 'DIFFER'}")
    return ok


def crumb(train, args):
    out = subprocess.run([train] + args, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", default="build/train")
    ap.add_argument("--data", default=os.environ.get("CRUMB_DATA", DEFAULT_DATA))
    a = ap.parse_args()
    if not os.path.isdir(a.data):
        print(f"skipped: no Fashion-MNIST at {a.data}", file=sys.stderr)
        return 77
    torch.manual_seed(0)
    x, y = load_split(a.data, "t10k", "cpu")
    x, y = x[:LIMIT_TEST], y[:LIMIT_TEST]
    common = ["--model", "resnet18", "--data", a.data, "--limit-test", str(LIMIT_TEST), "--device", "cpu"]
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "crumb.safetensors")
        summary = crumb(a.train, common + ["--limit-train", "1024", "--batch", "64", "--save", path])
        model = torchvision_resnet18()
        model.load_state_dict(load_file(path), strict=True)
        print("Crumb -> torchvision: load_state_dict(strict=True) ok")
        ok &= agree("Crumb", (summary["test_accuracy"], summary["test_loss"]), "torchvision", evaluate(model, x, y))

        model = torchvision_resnet18()
        model.train()
        with torch.no_grad():
            for i in range(3):  # move the running statistics away from 0 and 1
                model(x[i * 64:(i + 1) * 64])
        theirs = evaluate(model, x, y)
        path = os.path.join(tmp, "torchvision.safetensors")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
        summary = crumb(a.train, common + ["--epochs", "0", "--load", path, "--batch", "128"])
        print("torchvision -> Crumb: --load ok")
        ok &= agree("torchvision", theirs, "Crumb", (summary["test_accuracy"], summary["test_loss"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
