#!/usr/bin/env python3
"""Reference numbers for tests/torch_parity_test.cc: torchvision's resnet18 and vgg11_bn trained a few
SGD steps.

Weights, inputs and labels come from closed formulas that the test computes the same way, so no
tensor file is needed (the inputs rounded to float32, the trainer's image data). Both sides run in float64: with BatchNorm over a few values (8 samples of a 1x1
map in the last stage) float32 rounding alone moves PyTorch's own loss by 0.4% after one step and 20%
after two (float32 against float64, measured), so only float64 can show that the two compute the
same function. After the steps, each state_dict tensor is summarised by its L2 norm and its dot
product with cos(0.7 (i mod 1021)): enough to catch a wrong element, sign or layout, small enough to
commit. The period (a prime, so no tensor dimension lines up with it) lets the test take the cosines from
a table: computing one per element of vgg11_bn's 129M parameters took longer than its training steps.

Cases (resnet18: all three, on a batch of 8; vgg11_bn: batch and group_norm, on a batch of 2 with
dropout=0.0, since no two engines draw the same dropout masks):
  batch       BatchNorm over the whole batch (one forward of B per step): PyTorch's semantics,
              Crumb's --bn-group batch.
  per_group   BatchNorm over groups of 4, running statistics updated per group: PyTorch with
              gradient accumulation over micro-batches of 4 (loss / B each), Crumb's --bn-group 4
              --bn-stats per-group at any micro-batch size.
  group_norm  GroupNorm(min(32, c), c) in place of every BatchNorm: Crumb's --norm gn.

Run: .venv-bench/bin/python tools/bench/torchvision_reference.py > tests/torchvision_reference.h
"""
import math
import sys

import torch
import torchvision
from torch import nn

CHANNELS, SIZE, CLASSES, STEPS = 3, 32, 10, 3
# Per model: the header's name prefix, the batch and the cases. vgg11_bn's 119M-parameter classifier makes
# every step cost as much at any batch, so its batch is the smallest BatchNorm accepts on a 1x1 map.
MODELS = {"resnet18": ("ResNet", 8, ("batch", "per_group", "group_norm")), "vgg11_bn": ("Vgg", 2, ("batch", "group_norm"))}
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4
COSINE_PERIOD = 1021


def name_key(name):
    return sum(ord(c) for c in name) % 97


def hashed(j):
    """Uniform in [-1, 1) from integers j by a multiplicative hash: exact in double on every machine."""
    return ((j * 2654435761) % (1 << 32)).to(torch.float64) / (1 << 31) - 1.0


def init_values(name, shape):
    """The parameter `name`, element i (row-major) from a closed formula the C++ test mirrors."""
    wave = hashed(torch.arange(math.prod(shape), dtype=torch.int64) + 7919 * name_key(name))
    if len(shape) >= 2:
        fan_in = math.prod(shape) // shape[0]
        return wave / math.sqrt(fan_in)
    if name.endswith(".weight"):  # a norm layer's scale
        return 1.0 + 0.1 * wave
    return 0.1 * wave


def input_values(n):
    """The images' n values, rounded to float32 (and widened back): Crumb's trainer takes images as float32
    data, which its float64 loader widens exactly."""
    return hashed(torch.arange(n, dtype=torch.int64) + 12345).to(torch.float32).to(torch.float64)


def label(s):
    return (3 * s + 1) % CLASSES


def group_norm(c):
    return nn.GroupNorm(min(32, c), c)


def build(name, norm):
    """torchvision's model in the default dtype (float64, set by main) with the formula's weights."""
    if name == "resnet18":
        model = torchvision.models.resnet18(num_classes=CLASSES, **({"norm_layer": group_norm} if norm == "gn" else {}))
    else:
        model = torchvision.models.vgg11_bn(num_classes=CLASSES, dropout=0.0)
        if norm == "gn":  # torchvision's VGG takes no norm_layer: swap the layers, keeping their indices
            for i, m in enumerate(model.features):
                if isinstance(m, nn.BatchNorm2d):
                    model.features[i] = group_norm(m.num_features)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(init_values(name, tuple(p.shape)).reshape(p.shape))
    return model


def run(name, batch, case):
    torch.manual_seed(0)
    model = build(name, "gn" if case == "group_norm" else "bn")
    model.train()
    n = batch * CHANNELS * SIZE * SIZE
    x = input_values(n)
    x = x.reshape(batch, CHANNELS, SIZE, SIZE)
    y = torch.tensor([label(s) for s in range(batch)], dtype=torch.int64)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    chunk = 4 if case == "per_group" else batch
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        total = 0.0
        for lo in range(0, batch, chunk):
            loss = loss_fn(model(x[lo:lo + chunk]), y[lo:lo + chunk])
            (loss / batch).backward()
            total += loss.item()
        losses.append(total / batch)
        opt.step()
    summaries = []
    for key, t in model.state_dict().items():
        v = t.detach().to(torch.float64).flatten()
        if key.endswith("num_batches_tracked"):
            summaries.append((key, float(v[0]), float(v[0])))
            continue
        cosines = torch.cos(0.7 * (torch.arange(v.numel(), dtype=torch.int64) % COSINE_PERIOD).to(torch.float64))
        summaries.append((key, float(v.norm()), float((v * cosines).sum())))
    return losses, summaries


def main():
    torch.set_default_dtype(torch.float64)
    out = sys.stdout
    out.write(f"""// Generated by tools/bench/torchvision_reference.py with torch {torch.__version__}, torchvision
// {torchvision.__version__}; do not edit by hand. torchvision's resnet18 and vgg11_bn (dropout 0) after {STEPS} SGD
// steps (lr {LR}, momentum {MOMENTUM}, weight decay {WEIGHT_DECAY}) on a batch of {CHANNELS}x{SIZE}x{SIZE} images
// from closed formulas (float32 values), in float64 (tests/torch_parity_test.cc computes the same ones); each state_dict
// tensor summarised by its L2 norm and its dot product with cos(0.7 (i mod {COSINE_PERIOD})) (num_batches_tracked: its value,
// twice).
#pragma once

namespace crumb::reference {{

constexpr int kChannels = {CHANNELS}, kSize = {SIZE}, kClasses = {CLASSES}, kSteps = {STEPS};
constexpr int kCosinePeriod = {COSINE_PERIOD};
constexpr double kLr = {LR!r}, kMomentum = {MOMENTUM!r}, kWeightDecay = {WEIGHT_DECAY!r};

struct TensorSummary {{
  const char* name;
  double l2, dot;
}};
""")
    for name, (prefix, batch, cases) in MODELS.items():
        out.write(f"\n// {name}\nconstexpr int k{prefix}Batch = {batch};\n")
        for case in cases:
            losses, summaries = run(name, batch, case)
            ident = prefix + "".join(part.capitalize() for part in case.split("_"))
            out.write(f"\ninline const double k{ident}Losses[] = {{{', '.join(repr(l) for l in losses)}}};\n")
            out.write(f"inline const TensorSummary k{ident}Tensors[] = {{\n")
            for tensor, l2, dot in summaries:
                out.write(f'    {{"{tensor}", {l2!r}, {dot!r}}},\n')
            out.write("};\n")
    out.write("\n}  // namespace crumb::reference\n")


if __name__ == "__main__":
    main()
