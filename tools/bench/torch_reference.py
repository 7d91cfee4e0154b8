#!/usr/bin/env python3
"""PyTorch reference for Crumb's `train` tool.

Same flags, same models (nn.Sequential, so state_dict keys match Crumb's),
same data pipeline and the same JSON summary line, so tools/bench/compare.sh
can put the two side by side. The dataset is preloaded as tensors and
indexed by a permutation each batch: no DataLoader workers, so the baseline
measures PyTorch's compute, not Python data plumbing.

Progress goes to stderr; the last stdout line is the JSON summary.
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torchvision
from torch import nn

MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST train-set statistics, as in Crumb
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """Read an IDX file (gzipped or not) into a numpy array; never downloads."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    # Header: two zero bytes, a dtype code (0x08 = uint8), the number of dims,
    # then one big-endian uint32 per dim.
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not a uint8 IDX file")
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4)
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    return data.reshape(tuple(int(d) for d in dims))


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{stem}[.gz] not found in {data_dir}")


def load_split(data_dir, prefix, device):
    images = read_idx(find(data_dir, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find(data_dir, f"{prefix}-labels-idx1-ubyte"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0)
    x = ((x - MEAN) / STD).unsqueeze(1).contiguous()  # N x 1 x 28 x 28
    y = torch.from_numpy(labels.astype(np.int64))
    return x.to(device), y.to(device)


CIFAR_MEAN = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)  # Crumb's kCifar10Norm
CIFAR_STD = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)


def load_cifar_split(data_dir, train, device):
    """CIFAR-10's binary version (a label byte + 3x32x32 bytes per record), the files Crumb reads in its
    order, normalised per channel as Crumb's loader does."""
    files = [f"data_batch_{i}.bin" for i in range(1, 6)] if train else ["test_batch.bin"]
    raw = np.concatenate([np.fromfile(os.path.join(data_dir, f), dtype=np.uint8) for f in files]).reshape(-1, 3073)
    x = torch.from_numpy(raw[:, 1:].astype(np.float32) / 255.0).reshape(-1, 3, 32, 32)
    x = ((x - CIFAR_MEAN) / CIFAR_STD).contiguous()
    y = torch.from_numpy(raw[:, 0].astype(np.int64))
    return x.to(device), y.to(device)


class ResNet20(nn.Module):
    """He et al.'s CIFAR ResNet-20 from torchvision's BasicBlock, with its names and init and a projection
    shortcut where the shape changes: Crumb's resnet20, key for key."""

    def __init__(self, in_channels=1, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        self.inplanes = 16
        self.layer1, self.layer2, self.layer3 = (self._stage(p, s) for p, s in ((16, 1), (32, 2), (64, 2)))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _stage(self, planes, stride):
        blocks = []
        for i in range(3):
            s = stride if i == 0 else 1
            down = None
            if s != 1 or self.inplanes != planes:
                down = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride=s, bias=False), nn.BatchNorm2d(planes))
            blocks.append(torchvision.models.resnet.BasicBlock(self.inplanes, planes, s, down))
            self.inplanes = planes
        return nn.Sequential(*blocks)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build_model(name, channels=1, classes=10):
    """The model of `name` as Crumb builds it; the ResNets take any input channels and class count."""
    if name == "lenet5":
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(400, 120), nn.ReLU(),
            nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(3136, 128), nn.ReLU(),
            nn.Linear(128, 10))
    if name == "resnet20":
        return ResNet20(channels, classes)
    if name in ("resnet18", "resnet50"):
        model = getattr(torchvision.models, name)(num_classes=classes)
        if channels != 3:  # same name and init as torchvision's conv1
            model.conv1 = nn.Conv2d(channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
            nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
        return model
    if name == "vgg11_bn":
        model = torchvision.models.vgg11_bn(num_classes=classes)
        if channels != 3:  # same name and init as torchvision's first convolution
            model.features[0] = nn.Conv2d(channels, 64, kernel_size=3, padding=1)
            nn.init.kaiming_normal_(model.features[0].weight, mode="fan_out", nonlinearity="relu")
            nn.init.constant_(model.features[0].bias, 0)
        return model
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, 10))
    raise ValueError(f"unknown model {name}")


def sync(device):
    # CUDA kernels run asynchronously; wait for them before reading a timer.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def evaluate(model, x, y, batch=1000):
    model.eval()
    correct = 0
    for i in range(0, x.shape[0], batch):
        pred = model(x[i:i + batch]).argmax(dim=1)
        correct += (pred == y[i:i + batch]).sum().item()
    model.train()
    return correct / x.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="lenet5", choices=["lenet5", "cnn", "mlp", "resnet20", "resnet18", "resnet50", "vgg11_bn"])
    ap.add_argument("--limit-train", type=int, default=0, help="use only the first N training images")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dataset", default="fashion-mnist", choices=["fashion-mnist", "cifar10"])
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    # off: float32 everywhere (what Crumb computes by default); default: PyTorch's own defaults (cuDNN
    # convolutions in TF32, matmuls in float32); on: TF32 for both.
    ap.add_argument("--tf32", default="off", choices=["off", "default", "on"])
    args = ap.parse_args()
    if args.tf32 != "default":
        torch.backends.cudnn.allow_tf32 = args.tf32 == "on"
        torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "on"

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda requested but torch.cuda.is_available() is False")

    torch.manual_seed(args.seed)  # before building, so init is reproducible
    model = build_model(args.model, 3 if args.dataset == "cifar10" else 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr,
                          momentum=args.momentum, weight_decay=args.weight_decay)
    loss_fn = nn.CrossEntropyLoss()

    if args.dataset == "cifar10":
        x_train, y_train = load_cifar_split(args.data, True, device)
        x_test, y_test = load_cifar_split(args.data, False, device)
    else:
        x_train, y_train = load_split(args.data, "train", device)
        x_test, y_test = load_split(args.data, "t10k", device)
    if args.limit_train:
        x_train, y_train = x_train[:args.limit_train], y_train[:args.limit_train]
    n = x_train.shape[0]
    print(f"torch {torch.__version__} on {device}, {args.threads} threads; "
          f"{n} train / {x_test.shape[0]} test images", file=sys.stderr)

    # Own generator, so shuffling does not depend on how many random numbers
    # the init consumed; kept on the CPU because randperm's stream differs
    # between devices. Crumb shuffles with its own generator (splitmix64
    # Fisher-Yates), so the two sides see the same images in different orders.
    gen = torch.Generator().manual_seed(args.seed)

    train_seconds = 0.0
    acc = 0.0
    final_loss = float("nan")
    for epoch in range(args.epochs):
        perm = torch.randperm(n, generator=gen).to(device)
        # Loss is summed on the device: a per-batch .item() would force a
        # CUDA sync every step and distort the timing.
        loss_sum = torch.zeros((), device=device)
        sync(device)
        t0 = time.perf_counter()
        for i in range(0, n, args.batch):  # the short last batch is kept
            idx = perm[i:i + args.batch]
            xb, yb = x_train[idx], y_train[idx]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            loss_sum += loss.detach() * idx.shape[0]
        sync(device)
        train_seconds += time.perf_counter() - t0  # eval is not timed
        # final_loss = sample-weighted mean training loss of the last epoch.
        final_loss = loss_sum.item() / n
        acc = evaluate(model, x_test, y_test)
        print(f"epoch {epoch + 1}/{args.epochs}: loss {final_loss:.4f} "
              f"test acc {acc:.4f} ({train_seconds:.2f}s train so far)",
              file=sys.stderr)

    samples = n * args.epochs
    print(json.dumps({
        "model": args.model,
        "epochs": args.epochs,
        "batch": args.batch,
        "threads": args.threads,
        "samples_per_s": round(samples / train_seconds, 1),
        "train_seconds": round(train_seconds, 3),
        "test_accuracy": round(acc, 4),
        "final_loss": round(final_loss, 4),
        "torch_version": torch.__version__,
        "device": str(device),
        "tf32": args.tf32,
    }, separators=(",", ":")))  # compact, like Crumb's line


if __name__ == "__main__":
    main()
