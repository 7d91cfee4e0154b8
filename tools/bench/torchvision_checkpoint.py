#!/usr/bin/env python3
"""Checkpoints cross between Crumb and torchvision both ways, strictly, for resnet18 and vgg11_bn.

1. Crumb trains the model briefly and --saves; PyTorch loads the file with
   safetensors.torch.load_file + load_state_dict(strict=True) into torchvision's model and evaluates
   it in eval mode on the same test images: its accuracy and mean loss must be Crumb's (the running
   statistics and every weight came across).
2. torchvision's model (random weights, running statistics moved by a few training-mode forwards) is
   saved with safetensors.torch.save_file; Crumb --load's it with --epochs 0 (evaluate only): both
   must agree again.
resnet18 runs on Fashion-MNIST (conv1 for one input channel). vgg11_bn needs 32x32 images: it runs on
a small CIFAR-10-format folder of random images this script writes (so no download is needed), which
Crumb reads with --dataset cifar10 and normalises with CIFAR-10's channel statistics, as here.
Accuracies may differ by one test image at most (float32 ties in the argmax), mean test losses by 1e-4
relative (float32 rounding).

Usage: tools/bench/torchvision_checkpoint.py [--train build/train] [--data DIR] [--models resnet18,vgg11_bn]
CTest runs resnet18 only: vgg11_bn's 129M parameters (a 516 MB file each way, and both sides building
and initialising the model twice) take about 50 s on 2 cores.
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
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)  # engine/data/dataset.h


def torchvision_resnet18():
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3, bias=False)  # same name and init
    return model


def torchvision_vgg11_bn():
    return torchvision.models.vgg11_bn(num_classes=10)


def write_cifar(folder, train_per_file, test_count):
    """CIFAR-10's binary format (a label byte, then 3x32x32 bytes per record) with random images; returns
    the test images normalised as Crumb's loader normalises them, and their labels."""
    gen = torch.Generator().manual_seed(1)

    def records(n):
        images = torch.randint(0, 256, (n, 3, 32, 32), generator=gen, dtype=torch.uint8)
        labels = torch.randint(0, 10, (n,), generator=gen, dtype=torch.uint8)
        return images, labels, torch.cat([labels[:, None], images.reshape(n, -1)], 1).numpy().tobytes()

    for i in range(1, 6):
        with open(os.path.join(folder, f"data_batch_{i}.bin"), "wb") as f:
            f.write(records(train_per_file)[2])
    images, labels, raw = records(test_count)
    with open(os.path.join(folder, "test_batch.bin"), "wb") as f:
        f.write(raw)
    mean, std = torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1), torch.tensor(CIFAR_STD).view(1, 3, 1, 1)
    return (images.float() / 255 - mean) / std, labels.long()


def evaluate(model, x, y):
    """Test accuracy and mean cross-entropy in eval mode (running statistics)."""
    model.eval()
    with torch.no_grad():
        logits = model(x)
        return (logits.argmax(1) == y).double().mean().item(), nn.functional.cross_entropy(logits, y).item()


def agree(name_a, a, name_b, b, count):
    """Accuracies within one test image, mean losses within float32 rounding."""
    ok = abs(a[0] - b[0]) <= 1.0 / count + 1e-9 and abs(a[1] - b[1]) <= 1e-4 * abs(b[1])
    print(f"  test accuracy {name_a} {a[0]:.4f}, {name_b} {b[0]:.4f}; test loss {name_a} {a[1]:.6f}, "
          f"{name_b} {b[1]:.6f}: {'agree' if ok else 'DIFFER'}")
    return ok


def crumb(train, args):
    out = subprocess.run([train] + args, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def both_ways(train, tmp, name, make_model, common, train_flags, x, y):
    """Crumb -> torchvision and torchvision -> Crumb for one model; True when both agree."""
    print(name)
    path = os.path.join(tmp, f"{name}.crumb.safetensors")
    summary = crumb(train, common + train_flags + ["--save", path])
    model = make_model()
    model.load_state_dict(load_file(path), strict=True)
    print("  Crumb -> torchvision: load_state_dict(strict=True) ok")
    ok = agree("Crumb", (summary["test_accuracy"], summary["test_loss"]), "torchvision", evaluate(model, x, y), len(y))

    model = make_model()
    model.train()
    with torch.no_grad():
        for i in range(3):  # move the running statistics away from 0 and 1
            model(x[i * 16:(i + 1) * 16])
    theirs = evaluate(model, x, y)
    path = os.path.join(tmp, f"{name}.torchvision.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    summary = crumb(train, common + ["--epochs", "0", "--load", path])
    print("  torchvision -> Crumb: --load ok")
    return ok & agree("torchvision", theirs, "Crumb", (summary["test_accuracy"], summary["test_loss"]), len(y))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", default="build/train")
    ap.add_argument("--data", default=os.environ.get("CRUMB_DATA", DEFAULT_DATA))
    ap.add_argument("--models", default="resnet18")
    a = ap.parse_args()
    models = a.models.split(",")
    if "resnet18" in models and not os.path.isdir(a.data):
        print(f"skipped: no Fashion-MNIST at {a.data}", file=sys.stderr)
        return 77
    torch.manual_seed(0)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        if "resnet18" in models:
            x, y = load_split(a.data, "t10k", "cpu")
            x, y = x[:LIMIT_TEST], y[:LIMIT_TEST]
            common = ["--model", "resnet18", "--data", a.data, "--limit-test", str(LIMIT_TEST), "--device", "cpu",
                      "--batch", "64"]
            ok &= both_ways(a.train, tmp, "resnet18", torchvision_resnet18, common, ["--limit-train", "1024"], x, y)
        if "vgg11_bn" in models:
            # 119M parameters: a few small steps are enough to move every weight and running statistic.
            cifar = os.path.join(tmp, "cifar")
            os.mkdir(cifar)
            x, y = write_cifar(cifar, 16, 64)
            common = ["--model", "vgg11_bn", "--dataset", "cifar10", "--data", cifar, "--device", "cpu",
                      "--batch", "16", "--bn-group", "batch", "--lr", "0.001"]
            ok &= both_ways(a.train, tmp, "vgg11_bn", torchvision_vgg11_bn, common, ["--limit-train", "32"], x, y)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
