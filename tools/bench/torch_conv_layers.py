#!/usr/bin/env python3
"""PyTorch's (oneDNN's) time for each pass of the ResNet 3x3 convolutions at Fashion-MNIST sizes: the
other side of `build/kernels_bench --suites=resnet20_28` (same shapes, batch, threads), per layer, in ms.

usage: tools/bench/torch_conv_layers.py [--batch 128] [--threads 2] [--repeat 20]
Run with the bench venv's python (tools/bench/setup_venv.sh prints it). Each pass is its own call, as
autograd makes it: aten::convolution for the forward, aten::convolution_backward with an output mask
of the data or the weight gradient alone; best of --repeat runs."""
import argparse
import time

import torch

# name as in kernels_bench's resnet20_28 suite, c_in, c_out, input size, stride
LAYERS = [
    ("layer1.0.conv1", 16, 16, 28, 1),
    ("layer2.0.conv2", 32, 32, 14, 1),
    ("layer3.0.conv2", 64, 64, 7, 1),
    ("layer2.0.conv1", 16, 32, 28, 2),
    ("layer3.0.conv1", 32, 64, 14, 2),
]


def best_ms(f, repeat):
    for _ in range(3):
        f()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {a.threads} threads, batch {a.batch}; ms, best of {a.repeat}")
    print(f"{'layer':16s} {'shape':>16s} {'forward':>8s} {'data':>8s} {'weight':>8s}")
    for name, c_in, c_out, hw, stride in LAYERS:
        x = torch.randn(a.batch, c_in, hw, hw)
        w = torch.randn(c_out, c_in, 3, 3)
        conv = [(stride, stride), (1, 1), (1, 1), False, (0, 0), 1]  # stride, padding, dilation, ...
        dy = torch.randn_like(torch.ops.aten.convolution(x, w, None, *conv))

        def backward(mask):
            return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, *conv, mask)

        with torch.no_grad():
            fwd = best_ms(lambda: torch.ops.aten.convolution(x, w, None, *conv), a.repeat)
            data = best_ms(backward([True, False, False]), a.repeat)
            weight = best_ms(backward([False, True, False]), a.repeat)
        shape = f"{c_in}x{hw}x{hw}->{c_out}/s{stride}"
        print(f"{name:16s} {shape:>16s} {fwd:8.3f} {data:8.3f} {weight:8.3f}")


if __name__ == "__main__":
    main()
