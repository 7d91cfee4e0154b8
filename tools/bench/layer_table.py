#!/usr/bin/env python3
"""Crumb's CPU kernels against PyTorch's (oneDNN's), layer by layer: every convolution and linear pass of a
kernels_bench model suite (forward, data gradient, weight gradient), at the same shapes, batch and threads.

Each round runs `kernels_bench --suites=S --device=cpu` (its JSON: each node's time, shape label, how many
layers of the model share it, and % of the FMA peak) and then PyTorch on every shape it listed, each pass
its own call as autograd makes it (aten::convolution; aten::convolution_backward with an output mask of the
data or the weight gradient alone; the linear layer's matmuls); rounds alternate the two, and each figure
is the fastest of all rounds. The table gives each pass's time on both sides and PyTorch's time over
Crumb's (above 1: Crumb faster); the totals weigh each row by the layers that share it, as a training step
runs them. Then one JSON line.

usage: tools/bench/layer_table.py [--suites resnet20_28,resnet18_28] [--threads 2] [--rounds 3]
                                  [--repeat 10] [--kernels-bench build/kernels_bench]
Run with a python that has torch (main's .venv-py, or tools/bench/setup_venv.sh's). Timings are wall-clock
on shared cores: read them on a quiet machine, with the load average printed beside them."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import torch

PASSES = {"conv2d": "forward", "conv2d_backward_data": "data", "conv2d_backward_weight": "weight",
          "linear": "forward", "linear_backward_data": "data", "linear_backward_weight": "weight"}
DIMS = re.compile(r"\[([0-9,]*)\]")
WINDOW = re.compile(r"k(\d+)x(\d+) s(\d+)x(\d+) p(\d+)x(\d+)")


def kernels_rows(exe, suite, threads):
    """kernels_bench's conv and linear rows of `suite`: (op, node, label, layers, ms, pct_fma)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "kb.json")
        cmd = [exe, f"--suites={suite}", "--device=cpu", "--ceiling_seconds=0.2",
               "--benchmark_filter=^cpu/(conv2d|linear)", f"--benchmark_out={out}", "--benchmark_out_format=json"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
        except OSError as e:
            sys.exit(f"layer_table: cannot run --kernels-bench {exe}: {e.strerror} (build it: cmake --build build)")
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed: {p.stderr.strip()[-2000:]}")
        with open(out) as f:
            bench = json.load(f)["benchmarks"]
    rows = []
    for b in bench:
        op, _, node = b["name"].split("/")[1:4]
        if op in PASSES:
            scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b["time_unit"]]
            rows.append((op, node, b["label"], int(b.get("layers", 1)), b["real_time"] * scale, b.get("pct_fma")))
    return rows


def best_ms(f, repeat):
    for _ in range(2):
        f()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best * 1000


def torch_pass(op, label):
    """A no-argument function running PyTorch's pass for kernels_bench's row (its shape label), checked to
    give the row's output shape."""
    f = torch_call(op, label)
    out = f()
    out = out if isinstance(out, tuple) else (out,)
    got = [list(t.shape) for t in out if t is not None]
    want = [[int(d) for d in m.split(",") if d] for m in DIMS.findall(label.split("->")[1])]
    if got != want:
        sys.exit(f"layer_table: PyTorch's {op} gave {got} for kernels_bench's row {label!r}: the label's format changed?")
    return f


def torch_call(op, label):
    dims = [[int(d) for d in m.split(",") if d] for m in DIMS.findall(label)]
    if op.startswith("conv2d"):
        kh, kw, sh, sw, ph, pw = (int(v) for v in WINDOW.search(label).groups())
        if op == "conv2d":
            x_dims, w_dims = dims[0], dims[1]
        elif op == "conv2d_backward_data":
            w_dims, x_dims = dims[1], dims[2]
        else:
            x_dims, w_dims = dims[1], dims[2]
        x, w = torch.randn(x_dims), torch.randn(w_dims)
        conv = [(sh, sw), (ph, pw), (1, 1), False, (0, 0), x_dims[1] // w_dims[1]]
        if op == "conv2d":
            return lambda: torch.ops.aten.convolution(x, w, None, *conv)
        dy = torch.randn_like(torch.ops.aten.convolution(x, w, None, *conv))
        mask = [True, False, False] if op == "conv2d_backward_data" else [False, True, False]
        return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, *conv, mask)
    if op == "linear":
        x, w = torch.randn(dims[0]), torch.randn(dims[1])
        b = torch.randn(dims[1][0]) if len(dims) > 3 else None
        return lambda: torch.nn.functional.linear(x, w, b)
    if op == "linear_backward_data":
        dy, w = torch.randn(dims[0]), torch.randn(dims[1])
        return lambda: dy.mm(w)
    dy, x = torch.randn(dims[0]), torch.randn(dims[1])
    has_bias = len(dims) > 3
    return lambda: (dy.t().mm(x), dy.sum(0) if has_bias else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", default="resnet20_28,resnet18_28")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10, help="PyTorch calls per pass and round (fastest kept)")
    ap.add_argument("--kernels-bench", default="build/kernels_bench")
    a = ap.parse_args()
    if a.rounds < 1 or a.repeat < 1 or a.threads < 1:
        sys.exit("layer_table: --rounds, --repeat and --threads must be at least 1")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    load_before = os.getloadavg()[0]
    summary = {"bench": "layer_table", "torch": torch.__version__, "threads": a.threads, "rounds": a.rounds,
               "suites": {}}
    for suite in a.suites.split(","):
        best = {}  # (op, node) -> [layers, label, crumb ms, torch ms, pct_fma]
        for _ in range(a.rounds):
            for op, node, label, layers, ms, pct in kernels_rows(a.kernels_bench, suite, a.threads):
                row = best.setdefault((op, node), [layers, label, float("inf"), float("inf"), None])
                if ms < row[2]:
                    row[2], row[4] = ms, pct
            with torch.no_grad():
                for (op, _), row in best.items():
                    row[3] = min(row[3], best_ms(torch_pass(op, row[1]), a.repeat))
        print(f"\n{suite}: ms per call, fastest of {a.rounds} rounds (PyTorch {torch.__version__}, "
              f"{a.threads} threads); torch/crumb above 1: Crumb faster")
        print(f"{'node':34s} {'pass':>7s} {'layers':>6s} {'crumb':>8s} {'torch':>8s} {'torch/crumb':>11s} "
              f"{'%fma':>5s}  shape")
        totals = {}
        rows = []
        for (op, node), (layers, label, ms, tms, pct) in best.items():
            kind = PASSES[op]
            node_name = node.rsplit(".backward_", 1)[0]
            print(f"{node_name:34s} {kind:>7s} {layers:6d} {ms:8.3f} {tms:8.3f} {tms / ms:11.2f} "
                  f"{pct if pct is not None else float('nan'):5.1f}  {label}")
            t = totals.setdefault(kind, [0.0, 0.0])
            t[0] += layers * ms
            t[1] += layers * tms
            rows.append({"node": node_name, "pass": kind, "layers": layers, "crumb_ms": ms, "torch_ms": tms,
                         "pct_fma": pct, "shape": label})
        whole = [sum(t[0] for t in totals.values()), sum(t[1] for t in totals.values())]
        for kind, (c, t) in list(totals.items()) + [("all", whole)]:
            print(f"{'total (x layers)':34s} {kind:>7s} {'':6s} {c:8.2f} {t:8.2f} {t / c:11.2f}")
        summary["suites"][suite] = {"rows": rows, "totals": {k: {"crumb_ms": c, "torch_ms": t, "ratio": t / c}
                                                             for k, (c, t) in list(totals.items()) + [("all", whole)]}}
    summary["load_before"], summary["load_after"] = load_before, os.getloadavg()[0]
    print(f"\nload average {load_before:.2f} before, {summary['load_after']:.2f} after (1 minute)")
    print(json.dumps(summary, separators=(",", ":")))


if __name__ == "__main__":
    main()
