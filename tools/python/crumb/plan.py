"""Plans as objects: the micro-batch a budget allows, the memory breakdown, the arena blocks, the timeline
and the batch sweep, displayed in a notebook as the pictures of ``train --report``."""

from __future__ import annotations

import os
from typing import Literal, Sequence

from . import _crumb, _keywords, nn


def _cell(text: str):
    """A report cell as a number where it is one ("4096" -> 4096, "1.062" -> 1.062), else the text."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def model_args(model) -> tuple[list[tuple[str, str]], dict | None]:
    """The model option for a built-in name, or ``network`` (the description inline, docs/networks.md) for a
    network built with crumb.nn or converted by crumb.from_torch (anything with ``_crumb_network()``), with
    the weights it brings; none for None (the default model, or the one a resumed run recorded)."""
    if model is None:
        return [], None
    if isinstance(model, str):
        return [("model", model)], None
    if not hasattr(model, "_crumb_network"):
        raise _crumb.Error(f"model= takes a model name ({', '.join(_crumb.models())}) or a crumb.nn network, "
                           f"got {type(model).__name__}")
    text, weights = model._crumb_network()
    return [("network", text)], weights


class Plan:
    """The memory plan of a training run, before anything is allocated (``train --explain``)."""

    def __init__(self, native: _crumb.Plan):
        self._p = native

    micro_batch = property(lambda self: self._p.micro_batch, doc="samples per micro-batch the plan chose")
    arena_bytes = property(lambda self: self._p.arena_bytes, doc="the activation arena (values + workspace)")
    activation_bytes = property(lambda self: self._p.activation_bytes)
    workspace_bytes = property(lambda self: self._p.workspace_bytes)
    persistent_bytes = property(lambda self: self._p.persistent_bytes,
                                doc="parameters, gradients, optimizer state, 16-bit copies, running statistics")
    total_bytes = property(lambda self: self._p.total_bytes, doc="everything the budget counts")
    budget = property(lambda self: self._p.budget)
    batch = property(lambda self: self._p.batch)
    split = property(lambda self: self._p.split, doc='"batch 256 in 4 micro-batch(es) of 64 (...)"')
    device = property(lambda self: self._p.device)
    precision = property(lambda self: self._p.precision)
    strategy = property(lambda self: self._p.strategy, doc="micro-batch, swap, recompute or both")
    step_in_backward = property(lambda self: self._p.step_in_backward,
                                doc="the optimizer updates each parameter in the backward pass, its gradient in the "
                                    "arena (where nothing else meets the budget)")

    def explain(self) -> str:
        """What ``train --explain`` prints."""
        return self._p.explain()

    @property
    def breakdown(self) -> list[dict]:
        """The rows --explain prints (part, bytes, dtype, holds): ``pandas.DataFrame(plan.breakdown)``."""
        return self._p.breakdown()

    def table(self, name: str) -> list[dict]:
        """A table of the report as rows: "breakdown", "blocks", "timeline", "sweep", and "frontier" once
        ``frontier()`` or ``svg("frontier")`` measured it."""
        tables = self._p.tables()
        if name not in tables:
            raise _crumb.Error(f"no table named {name!r} ({', '.join(tables)})")
        _caption, header, rows = tables[name]
        return [{h: _cell(c) for h, c in zip(header, row)} for row in rows]

    blocks = property(lambda self: self.table("blocks"), doc="the arena's blocks: offset, bytes, steps, role")
    timeline = property(lambda self: self.table("timeline"), doc="live bytes at each step")

    def sweep(self, micro_batches=None) -> list[dict]:
        """The memory of each micro-batch size (bytes per part, total, whether it fits the budget); by
        default the report's sizes (powers of two, the batch and the chosen one)."""
        if micro_batches is None:
            return self._p.default_sweep()
        return self._p.sweep([int(m) for m in micro_batches])

    def frontier(self) -> list[dict]:
        """The memory-time frontier at the plan's micro-batch (``train --explain --frontier``): from the least
        memory a plan fits in to in memory, one row per point: its total bytes, the step the cost model predicts
        (kernel times measured on this machine), both as ratios to in memory, the plan there (in memory, swap,
        recompute, swap+recompute), how many saved values it keeps, recomputes and swaps, and whether the
        point fits the budget. ``--strategy auto`` takes the fastest point that fits. Measured once per plan:
        ``svg("frontier")`` draws the same points, and the report shows them from then on."""
        return self._p.frontier()

    def svg(self, name: str) -> str:
        """A picture of the report as SVG text: "arena_map", "timeline", "sweep" or "frontier" (the memory-time
        frontier as a Pareto curve, the budget's point and the budget line marked; see ``frontier()``)."""
        return self._p.svg(name)

    def save_report(self, path: str | os.PathLike, dir: str | os.PathLike | None = None) -> None:
        """Writes the HTML report (``train --report``), and its pictures and tables to ``dir``."""
        self._p.save_report(os.fspath(path), os.fspath(dir) if dir else "")

    def _repr_html_(self) -> str:
        return self._p.html(True)

    def __repr__(self) -> str:
        return (f"<crumb.Plan {self._p.title}: {self.split}; arena {_crumb.format_bytes(self.arena_bytes)}, "
                f"total {_crumb.format_bytes(self.total_bytes)} of {_crumb.format_bytes(self.budget)}>")


def _plan(model, options) -> Plan:
    args, _weights = model_args(model)
    return Plan(_crumb.Plan(args + [("dataset", "synthetic")] + options))


# generated by tools/python/gen_keywords.py from the option table: do not edit
@_keywords.options("plan", _plan)
def plan(
    model: str | nn.Module = "lenet5",
    input: tuple[int, int, int] = (1, 28, 28),
    classes: int = 10,
    batch: int = 64,
    *,
    norm: Literal["bn", "gn"] = "bn",
    bn_group: int | Literal["batch"] = 32,
    bn_stats: Literal["deferred", "per-group"] = "deferred",
    dropout: float = 0.5,
    micro_batch: int | None = None,
    optimizer: Literal["sgd", "adamw"] = "sgd",
    lr: float | None = None,
    weight_decay: float | None = None,
    momentum: float = 0.9,
    nesterov: bool = False,
    beta1: float = 0.9,
    beta2: float = 0.999,
    eps: float = 1e-08,
    lr_schedule: Literal["constant", "step", "cosine"] = "constant",
    lr_step_size: int = 1000,
    lr_gamma: float = 0.1,
    warmup_steps: int = 0,
    device: Literal["cpu", "cuda"] | None = None,
    threads: int = 2,
    seed: int = 0,
    augment: Literal["none", "crop-flip"] = "none",
    shuffle: bool = True,
    memory_budget: int | str | None = None,
    strategy: Literal["auto", "micro-batch", "swap", "recompute", "none"] = "auto",
    precision: Literal["fp32", "tf32", "bf16", "fp16", "fp64"] = "fp32",
    loss_scale: float = 65536.0,
    loss_scale_growth_interval: int = 2000,
    channels_last: Literal["on", "off", "auto"] = "auto",
    cuda_graphs: bool = True,
    fuse: bool = True,
    deterministic: bool = False,
) -> Plan:
    """The memory plan of a training run, before anything is allocated (``train --explain``): ``model`` for
    images of shape ``input`` (C, H, W) and ``classes`` classes, trained in batches of ``batch`` within
    ``memory_budget``.

    Every keyword is an option of the run, the same as a flag of the ``train`` program (``micro_batch=8`` is
    ``--micro-batch 8``): a bad value raises crumb.Error with its message, a value of the wrong type TypeError,
    a misspelt keyword TypeError naming the closest one.

    Keywords:
        model: a built-in model's name (cnn | lenet5 | mlp | resnet18 | resnet20 | resnet50 | vgg11_bn (vgg11_bn:
            images of at least 32x32, e.g. --dataset cifar10)), or a network from crumb.nn or crumb.from_torch
        input: synthetic: image shape, e.g. 3x224x224
        classes: synthetic: number of classes
        batch: samples per optimizer step
        norm: models with normalisation layers: bn (BatchNorm) | gn (GroupNorm, 32 groups or fewer; independent of
            the batch, so micro-batching is exact with no conditions)
        bn_group (G): BatchNorm normalises over groups of G samples; micro-batches hold whole groups, so results do
            not depend on the micro-batch size or the budget. "batch": over the whole batch (PyTorch's semantics),
            which must then run as one micro-batch
        bn_stats: deferred: one running-statistics update per optimizer step from the exact whole-batch mean and
            variance | per-group: one update per group, as PyTorch does per forward under gradient accumulation
        dropout: vgg11_bn: the classifier's dropout probability, in [0, 1); each sample's mask depends on (seed,
            step, its index in the batch), not on the micro-batch
        micro_batch: samples per forward/backward, at most ``batch``; gradients of the micro-batches are
            accumulated, so the step equals a full-batch step (default the largest that fits ``memory_budget``, the
            whole batch where it fits)
        optimizer: sgd | adamw (torch.optim.SGD / torch.optim.AdamW semantics); sets the defaults of the others
            below
        lr: learning rate (default 0.05 for sgd, 0.001 for adamw)
        weight_decay (X): sgd: L2 term added to the gradient; adamw: decoupled, p *= 1 - lr * X (default 0 for sgd,
            0.01 for adamw)
        momentum: sgd: momentum in [0, 1)
        nesterov: sgd: Nesterov momentum (needs ``momentum`` > 0)
        beta1: adamw: first-moment decay in [0, 1)
        beta2: adamw: second-moment decay in [0, 1)
        eps: adamw: term added to the denominator, > 0
        lr_schedule: constant | step | cosine, evaluated once per optimizer step: step multiplies the lr by
            ``lr_gamma`` every ``lr_step_size`` optimizer steps (PyTorch StepLR counted in steps); cosine anneals it
            to 0 over the run's optimizer steps (CosineAnnealingLR, T_max = all steps, resumed ones included)
        lr_step_size: step: optimizer steps between decays
        lr_gamma: step: factor per decay in (0, 1]
        warmup_steps (N): linear warmup: step k < N runs at lr * (k + 1) / N, times the schedule (PyTorch LinearLR,
            start_factor 1/N, total_iters N - 1; 0: none)
        device: cpu | cuda (default cuda when a GPU is usable, else cpu)
        threads: CPU threads for all kernels
        seed: seed for initialisation, shuffling, augmentation, dropout and synthetic data
        augment: none | crop-flip (random crop with 4-pixel zero padding, horizontal flip, on the training set,
            seeded)
        shuffle: on: each epoch's training samples in a fresh order drawn from (seed, epoch), as PyTorch's
            DataLoader(shuffle=True); off: the data's own order in every epoch (shuffle=False)
        memory_budget: memory for persistent state + arena + workspace + input staging, e.g. 64MiB, 1.5GiB; the
            largest micro-batch that fits is used (default 4GiB on the CPU, 95% of the free GPU memory on CUDA)
        strategy: how to fit the budget: auto | micro-batch | swap | recompute | none. auto: the largest micro-batch
            that fits in memory; where even the smallest allowed one, or ``micro_batch``, does not fit, saved
            activations are swapped to host memory or recomputed in the backward pass, each where the cost model,
            fed by kernel times and copy bandwidth measured here, predicts it is cheaper. swap / recompute: only
            that technique, at the largest micro-batch it fits. none: the whole batch in memory. Results are the
            same bits either way
        precision: fp32 | tf32 | bf16 | fp16 | fp64. tf32: CUDA matrix products and convolutions round float32
            operands to TF32 on tensor cores (faster, ~1e-3 relative error per product; PyTorch's default for
            convolutions); the CPU computes float32. bf16, fp16: mixed precision as torch.autocast: activations and
            their gradients are 16-bit (half the arena), convolutions and linear layers read 16-bit weight copies,
            and weights, their gradients (accumulated over micro-batches in float32), optimizer state, BatchNorm
            statistics and the loss stay float32; checkpoints hold the float32 weights. fp16 scales the loss
            dynamically (docs/precision.md); bf16 needs a GPU of compute capability >= 8.0. fp64: everything in
            float64 (inputs, activations, weights, gradients, optimizer state, checkpoints), on the CPU only: a
            reference mode for comparing with another engine's float64 run, with about twice fp32's memory and time
        loss_scale: fp16: the initial loss scale, a power of two
        loss_scale_growth_interval: fp16: clean steps in a row before the scale doubles
        channels_last: run convolutions, normalisation and pooling in NHWC (channels_last), with conversions where
            the network leaves them (auto: on for bf16 and fp16 on CUDA, where cuDNN's tensor-core kernels want
            NHWC; off otherwise). The result is the same up to float32 summation order; checkpoints stay NCHW
        cuda_graphs: record each micro-batch's work once and replay it as one CUDA graph
        fuse: fuse chains of ops into one op each after autograd: BatchNorm or GroupNorm (+ the residual add) +
            ReLU, forward and backward; --explain names the fused steps. The result is the same up to float32
            rounding order
        deterministic: CUDA: only convolution algorithms that give the same bits on every run, as
            torch.backends.cudnn.deterministic (some of cuDNN's fastest backward ones add with atomics); the CPU is
            deterministic without it
    """
# end of generated code
