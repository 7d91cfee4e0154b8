#!/usr/bin/env python3
"""Peak activation memory of one PyTorch training step (forward + backward) on CPU.

The figure to set against Crumb's arena (`train --explain`), which holds every
activation, saved-for-backward tensor, activation gradient and kernel workspace
of one micro-batch, but not the input batch, parameters, parameter gradients or
optimizer state.

Method (peak_activation_bytes): torch.profiler with profile_memory=True records
every CPU allocation and free made through c10's allocator, with its pointer
and size. Only forward + backward run inside the profiler, after a warm-up step
(so lazily created state, e.g. momentum buffers, already exists) and after
zero_grad(set_to_none=True), PyTorch's default and what torch_reference.py
does. The events are replayed in time order as a running sum and the maximum
is reported, so it counts outputs, saved tensors, activation gradients, autograd
and oneDNN temporaries (blocked-layout reorders, weight-grad scratch) that go
through the allocator. Excluded: the input batch, labels and parameters (they
exist before the window) and the parameter gradients, i.e. the allocations
still live at the end whose storage became a p.grad (with set_to_none=True
autograd steals the backward op's output into .grad). Not visible: memory
oneDNN or the BLAS library mallocs on its own, and the Python objects.

saved_tensor_bytes: the storages autograd saves for backward (via
saved_tensors_hooks), deduplicated by storage pointer, without parameters and
the input batch: a lower figure, the part of the peak that has to live across
forward and backward.

The last stdout line is a JSON summary.
"""
import argparse
import json
import os
import sys

# Kineto logs a misleading "gpuGetDeviceCount failed" error on CPU-only machines.
os.environ.setdefault("KINETO_LOG_LEVEL", "5")
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import build_model  # noqa: E402  same models as compare.sh


def op_of(node):
    """Which op an allocation belongs to: its autograd node, else its outermost aten op."""
    name = "?"
    while node is not None:
        if node.name.startswith("autograd::engine::evaluate_function: "):
            return node.name.split(": ", 1)[1]
        if node.name.startswith("aten::"):
            name = node.name
        node = node.parent
    return name


def allocation_events(prof):
    """CPU allocator events (ptr, signed size, total_allocated, op) in time order."""
    out = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if str(node.tag).endswith("Allocation"):
            f = node.extra_fields
            if f.device.type == "cpu":
                out.append((node.start_time_ns, f.ptr, f.alloc_size, f.total_allocated,
                            op_of(node)))
    out.sort(key=lambda e: e[0])
    return out


def peak_bytes(events, grad_ptrs):
    """Peak of the running sum of allocations, without those that end up as p.grad."""
    live = {}  # ptr -> index of its allocation event
    for i, (_, ptr, size, _, _) in enumerate(events):
        if size > 0:
            live[ptr] = i
        elif live.pop(ptr, None) is None:
            # A free of something allocated before the window would make the
            # running sum wrong; none is expected, so fail loudly.
            raise RuntimeError(f"free of {-size} B at {ptr:#x} not allocated in the window")
    excluded = {i for ptr, i in live.items() if ptr in grad_ptrs}
    cur = peak = everything = 0
    peak_op = None
    for i, (_, _, size, total, op) in enumerate(events):
        everything += size
        # The allocator's own running total confirms the event order.
        if everything - events[0][2] != total - events[0][3]:
            raise RuntimeError("allocation events out of order")
        cur += 0 if i in excluded else size
        if cur > peak:
            peak, peak_op = cur, op
    return peak, peak_op, sum(events[i][2] for i in excluded)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="lenet5", choices=["lenet5", "cnn", "mlp", "resnet20", "resnet18", "resnet50", "vgg11_bn"])
    ap.add_argument("--input", default="1x28x28", help="image shape CxHxW")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-mkldnn", action="store_true",
                    help="disable oneDNN (conv falls back to PyTorch's own im2col kernels)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    if args.no_mkldnn:
        torch.backends.mkldnn.enabled = False
    torch.manual_seed(0)
    c, h, w = (int(v) for v in args.input.split("x"))
    model = build_model(args.model, c, args.classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # Random data of the real shape: memory does not depend on the values.
    x = torch.randn(args.batch, c, h, w)
    y = torch.randint(0, args.classes, (args.batch,))

    def forward_backward():
        loss_fn(model(x), y).backward()  # loss and graph die on return

    opt.zero_grad(set_to_none=True)
    forward_backward()  # warm-up: creates momentum buffers, oneDNN primitives
    opt.step()
    opt.zero_grad(set_to_none=True)

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        forward_backward()
    events = allocation_events(prof)
    grads = {p.grad.untyped_storage().data_ptr() for p in model.parameters()}
    peak, peak_op, grad_bytes = peak_bytes(events, grads)

    # Saved-for-backward storages, second (unprofiled) step.
    outside = {t.untyped_storage().data_ptr() for t in [x, y, *model.parameters()]}
    saved = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in outside:
            saved[s.data_ptr()] = s.nbytes()
        return t

    opt.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward_backward()

    print(f"torch {torch.__version__}, {args.model} batch {args.batch}: "
          f"{len(events)} allocator events, peak {peak} B in {peak_op}, parameter grads excluded "
          f"{grad_bytes} B, saved {sum(saved.values())} B in {len(saved)} storages",
          file=sys.stderr)
    print(json.dumps({
        "model": args.model,
        "batch": args.batch,
        "torch_version": torch.__version__,
        "peak_activation_bytes": peak,
        "saved_tensor_bytes": sum(saved.values()),
        "peak_op": peak_op,
        "param_grad_bytes_excluded": grad_bytes,
        "mkldnn": torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available(),
        "method": "profiler CPU alloc/free events, forward+backward, peak running sum "
                  "minus parameter grads",
    }, separators=(",", ":")))


if __name__ == "__main__":
    main()
