#!/usr/bin/env python3
"""Reference numbers for tests/autocast_parity_test.cc: Crumb's lenet5 and resnet20 (the PyTorch twins of
torch_reference.py, whose state_dict keys are Crumb's parameter names) trained one SGD step under
torch.autocast("cpu", dtype=torch.bfloat16) with float32 master weights, as `train --precision bf16` does.

Weights, inputs and labels come from the closed formulas of torchvision_reference.py (the test computes
the same ones), in float32. One step: the forward's loss, backward, SGD (lr 0.1, momentum 0.9); then a
second forward (its loss, which reads the updated weights through their bf16 copies). What the step
changed in each state_dict tensor (its float32 value after minus before: a parameter's update, a BatchNorm
statistic's update) is summarised by its L2 norm and its dot product with cos(0.7 (i mod 1021)). The same
step without autocast (float32 throughout) gives the scale that bf16 rounding moves each number by.

On stderr, how much of the difference between two correct bf16 implementations is noise, which the
test's tolerances rest on (docs/precision.md):
- emulated: the forward in float32 with the convolutions' and linear layers' operands and every op's
  output rounded to bf16 (autocast's arithmetic, in other summation orders, as Crumb computes it): its
  loss against autocast's, and per layer the fraction of outputs that differ from autocast's;
- perturbed: the next forward's loss when autocast's gradients are multiplied by 1 + 0.001 N(0, 1) before
  the step (three draws): how much the loss after the step hangs on the gradients' last bits.

Run: .venv-bench/bin/python tools/bench/autocast_reference.py > tests/autocast_reference.h
"""
import sys

import torch
from torch import nn
from torch.nn import functional as F

from torch_reference import build_model
from torchvision_reference import COSINE_PERIOD, init_values, input_values

CHANNELS, SIZE, CLASSES, BATCH = 1, 28, 10, 16
MODELS = {"lenet5": "LeNet5", "resnet20": "ResNet20"}
LR, MOMENTUM = 0.1, 0.9
PERTURBATION = 1e-3


def make_model(name):
    torch.manual_seed(0)
    model = build_model(name, CHANNELS, CLASSES)
    with torch.no_grad():
        for key, p in model.named_parameters():
            p.copy_(init_values(key, tuple(p.shape)).reshape(p.shape))
    return model.train()


def make_batch():
    x = input_values(BATCH * CHANNELS * SIZE * SIZE).to(torch.float32).reshape(BATCH, CHANNELS, SIZE, SIZE)
    y = torch.tensor([(3 * s + 1) % CLASSES for s in range(BATCH)], dtype=torch.int64)
    return x, y


def summarise(v):
    """L2 norm and cosine dot product of a tensor, in float64."""
    v = v.detach().to(torch.float64).flatten()
    cosines = torch.cos(0.7 * (torch.arange(v.numel(), dtype=torch.int64) % COSINE_PERIOD).to(torch.float64))
    return float(v.norm()), float((v * cosines).sum())


def run(name, autocast, perturb_seed=None):
    """Losses of the step's forward and of the next, and per state_dict tensor (name, l2, dot) of the step's
    change. perturb_seed: multiply the gradients by 1 + PERTURBATION N(0, 1) (that generator) first."""
    model = make_model(name)
    before = {key: t.clone() for key, t in model.state_dict().items()}
    x, y = make_batch()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    def forward():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return F.cross_entropy(model(x), y)

    loss = forward()
    loss.backward()
    if perturb_seed is not None:
        noise = torch.Generator().manual_seed(perturb_seed)
        for p in model.parameters():
            p.grad.mul_(1 + PERTURBATION * torch.randn(p.grad.shape, generator=noise))
    opt.step()
    summaries = []
    for key, t in model.state_dict().items():
        if key.endswith("num_batches_tracked"):
            summaries.append((key, float(t), float(t)))
        else:
            summaries.append((key, *summarise(t - before[key])))
    with torch.no_grad():
        next_loss = forward()
    return (loss.item(), next_loss.item()), summaries


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


class RoundToBf16(torch.overrides.TorchFunctionMode):
    """Float32 ops with bf16 operands for convolutions and linear layers and bf16-rounded float outputs,
    but the loss (autocast runs cross entropy in float32)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (F.conv2d, F.linear):
            args = tuple(bf16(a) if isinstance(a, torch.Tensor) else a for a in args)
        out = func(*args, **kwargs)
        if func is F.cross_entropy or not isinstance(out, torch.Tensor) or out.dtype != torch.float32:
            return out
        return bf16(out)


def emulated(name):
    """The emulated forward's loss minus autocast's, and per leaf module call the fraction of its outputs
    that differ from autocast's."""
    x, y = make_batch()
    outputs, losses = ({}, {}), []
    for emulate in (False, True):
        model = make_model(name)
        for module_name, m in model.named_modules():
            if isinstance(m, nn.ReLU):
                m.inplace = False  # keep each call's output as it was produced
            if not list(m.children()):  # a module called twice (a block's ReLU) records both calls
                m.register_forward_hook(lambda _, __, out, key=module_name, seen=outputs[emulate]:
                                        seen.setdefault(key, []).append(out.detach().float().clone()))
        with torch.no_grad():
            if emulate:
                with RoundToBf16():
                    losses.append(F.cross_entropy(model(bf16(x)), y).item())
            else:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    losses.append(F.cross_entropy(model(x), y).item())
    differing = {}
    for key, calls in outputs[False].items():
        for i, (a, b) in enumerate(zip(calls, outputs[True][key])):
            differing[key + (f"#{i + 1}" if len(calls) > 1 else "")] = float((a != b).float().mean())
    return losses[1] - losses[0], differing


def report_noise(name):
    loss_difference, differing = emulated(name)
    print(f"{name} emulated: loss {loss_difference:.2g} from autocast's; outputs differing per layer: "
          + ", ".join(f"{key} {fraction:.2g}" for key, fraction in differing.items()), file=sys.stderr)
    next_loss = run(name, True)[0][1]
    moved = [run(name, True, seed)[0][1] - next_loss for seed in range(3)]
    print(f"{name} perturbed: the next loss moves by {', '.join(f'{m:.2g}' for m in moved)}", file=sys.stderr)


def main():
    torch.set_num_threads(2)
    out = sys.stdout
    out.write(f"""// Generated by tools/bench/autocast_reference.py with torch {torch.__version__}; do not edit by hand:
//   .venv-bench/bin/python tools/bench/autocast_reference.py > tests/autocast_reference.h
// lenet5 and resnet20 (BatchNorm over the batch) on a batch of {BATCH} {CHANNELS}x{SIZE}x{SIZE} images from closed
// formulas (tests/autocast_parity_test.cc computes the same ones), one SGD step (lr {LR}, momentum {MOMENTUM}) under
// torch.autocast("cpu", dtype=torch.bfloat16) with float32 master weights, and the same step in float32.
// Losses: the step's forward, and the next forward's (after the update). Per state_dict tensor, what the
// step changed (after minus before: a parameter's update, a BatchNorm statistic's) summarised by its L2
// norm and its dot product with cos(0.7 (i mod {COSINE_PERIOD})), under autocast and in float32
// (num_batches_tracked: its value after the step).
#pragma once

namespace crumb::autocast_reference {{

constexpr int kChannels = {CHANNELS}, kSize = {SIZE}, kClasses = {CLASSES}, kBatch = {BATCH};
constexpr double kLr = {LR!r}, kMomentum = {MOMENTUM!r};

struct Losses {{
  double step, next;
}};

struct TensorSummary {{
  const char* name;
  double l2, dot;            // under autocast
  double fp32_l2, fp32_dot;  // in float32
}};
""")
    for name, ident in MODELS.items():
        (bf16_losses, summaries), (fp32_losses, fp32) = run(name, True), run(name, False)
        out.write(f"\n// {name}\n")
        out.write(f"inline const Losses k{ident}Losses = {{{bf16_losses[0]!r}, {bf16_losses[1]!r}}};\n")
        out.write(f"inline const Losses k{ident}Fp32Losses = {{{fp32_losses[0]!r}, {fp32_losses[1]!r}}};\n")
        out.write(f"inline const TensorSummary k{ident}Tensors[] = {{\n")
        for (key, l2, dot), (key32, l2_32, dot_32) in zip(summaries, fp32):
            assert key == key32
            out.write(f'    {{"{key}", {l2!r}, {dot!r}, {l2_32!r}, {dot_32!r}}},\n')
        out.write("};\n")
        report_noise(name)
    out.write("\n}  // namespace crumb::autocast_reference\n")


if __name__ == "__main__":
    main()
