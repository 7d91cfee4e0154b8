#!/usr/bin/env python3
"""Crumb's memory-time trade against torch.compile's `activation_memory_budget`, on this CPU (issue 39).

PyTorch side: for each budget b in --budgets (default 0.1, 0.2, ..., 1.0), a fresh process sets
`torch._functorch.config.activation_memory_budget = b`, compiles the model with torch.compile (the
min-cut partitioner then recomputes what its knapsack picks so that the saved activations stay under b
times those of b = 1), trains --warmup steps (the first compiles), then measures:
  - memory: one forward + backward under torch.profiler(profile_memory=True), replayed as a running sum of
    c10's CPU allocations and frees (tools/bench/torch_memory.py's method, which sees what inductor's
    generated code allocates too), without the parameter gradients, plus the exact bytes of the
    parameters, their gradients, SGD's momentum and the BatchNorm buffers: the same parts as Crumb's total
    without its loader buffers;
  - time: the mean of --steps timed optimizer steps (forward, backward, SGD step), after the warm-up.
Crumb side: at each of PyTorch's memories M, `train --memory-budget M + L` (L: Crumb's loader buffers, its
input batches, which the PyTorch figure leaves out as it leaves out its input tensor) trains --steps + 1
optimizer steps on synthetic data; memory is the plan's total without the loader buffers (the arena,
preallocated, plus parameters, gradients, momentum, BatchNorm state and any host swap pool, from the run's
JSON and --explain; --strategy recompute by default, as a swap pool on a CPU is host memory too), time is
the mean of the --steps steps after the first (from its --log: each step's end, batch x steps over the
rate so far), as PyTorch's steps after its warm-up. BatchNorm normalises over the whole batch on
both sides (--bn-group = batch) unless --bn-group says otherwise, so both compute the same step; Crumb can
then only recompute or swap, not micro-batch.

Prints a table per model, one JSON line at the end, and with --svg FILE a chart of step time against memory
(--replot FILE --svg OUT draws it again from a saved output).
usage: .venv-py/bin/python tools/bench/frontier_vs_torch.py [--train build/train] [--models resnet20]
         [--batch 128] [--resnet50-batch 32] [--resnet50-input 3x224x224] [--steps 3] [--repeat 1] [--svg out.svg]
The PyTorch processes need a C++ compiler (inductor's CPU code); each compiles for a minute or more here.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def torch_point(a):
    """One PyTorch measurement (run in its own process): prints a JSON line."""
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    import torch
    import torch._functorch.config as functorch_config
    from torch import nn
    from torch.profiler import ProfilerActivity, profile
    sys.path.insert(0, HERE)
    from torch_memory import allocation_events, peak_bytes
    from torch_reference import build_model

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    functorch_config.activation_memory_budget = a.torch_point
    c, h, w = (int(v) for v in a.input.split("x"))
    model = build_model(a.model, c, a.classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    compiled = torch.compile(model)
    x = torch.randn(a.batch, c, h, w)
    y = torch.randint(0, a.classes, (a.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(compiled(x), y).backward()
        opt.step()

    started = time.perf_counter()
    for _ in range(a.warmup):
        step()
    compile_s = time.perf_counter() - started
    opt.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss_fn(compiled(x), y).backward()
    grads = {p.grad.untyped_storage().data_ptr() for p in model.parameters()}
    peak, peak_op, _ = peak_bytes(allocation_events(prof), grads)
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    print(json.dumps({"budget": a.torch_point, "peak_activation_bytes": peak, "peak_op": peak_op,
                      "persistent_bytes": 3 * params + buffers, "memory_bytes": peak + 3 * params + buffers,
                      "step_s": sum(times) / len(times), "step_times": times, "warmup_s": compile_s,
                      "torch_version": torch.__version__}))


def run_torch(a, model, batch, shape, classes, budget):
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-point", str(budget), "--model", model, "--batch",
           str(batch), "--input", shape, "--classes", str(classes), "--threads", str(a.threads), "--steps",
           str(a.steps), "--warmup", str(a.warmup)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"torch at activation_memory_budget {budget} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def crumb_common(a, model, batch, shape, classes):
    return [a.train, "--model", model, "--dataset", "synthetic", "--input", shape, "--classes", str(classes),
            "--batch", str(batch), "--bn-group", str(a.bn_group or batch), "--threads", str(a.threads),
            "--strategy", a.strategy]


def crumb_in_memory(common):
    """Crumb's in-memory plan from --explain: its loader buffers (input batches), its total, and the parts
    that do not depend on the plan (parameters, gradients, momentum, BatchNorm state)."""
    p = subprocess.run(common + ["--explain"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"train --explain failed: {p.stderr.strip()}")
    sizes = {}
    for line in p.stdout.splitlines():
        words = line.split()
        at = {"total": 1, "loader": 3, "arena": 2}.get(words[0] if words else "")
        if at and words[at + 1] in UNITS and words[0] not in sizes:
            sizes[words[0]] = float(words[at]) * UNITS[words[at + 1]]
    return sizes["loader"], sizes["total"], sizes["total"] - sizes["arena"] - sizes["loader"]


def run_crumb(a, common, batch, budget, persistent):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "steps.jsonl")
        args = common + ["--memory-budget", str(int(budget)), "--epochs", "1", "--limit-train",
                         str(batch * (a.steps + 1)), "--limit-test", "16", "--log", log]
        p = subprocess.run(args, capture_output=True, text=True)
        if p.returncode != 0:
            return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
        with open(log) as f:
            steps = [e for e in map(json.loads, f) if e["event"] == "step"]
    j = json.loads(p.stdout.strip().splitlines()[-1])
    # When each step ended: its samples so far over the rate so far.
    ends = [e["step"] * batch / e["samples_per_s"] for e in steps]
    return {"memory_bytes": j["arena_bytes"] + persistent + j["host_pool_bytes"],
            "step_s": (ends[-1] - ends[0]) / (len(ends) - 1), "plan": j["strategy_used"], "micro_batch": j["micro_batch"],
            "recomputed": j["recomputed"], "swapped": j["swapped"], "arena_bytes": j["arena_bytes"],
            "budget": int(budget)}


def mib(b):
    return f"{b / 2**20:.2f} MiB"


def compare(a, model, batch, shape, classes):
    common = crumb_common(a, model, batch, shape, classes)
    loader, in_memory, persistent = crumb_in_memory(common)
    rows = []
    for b in a.budgets:
        # --repeat rounds, the two sides in turn, each keeping its fastest (Crumb's budget is PyTorch's first
        # round's memory; both sides' memories are the same every round).
        t = c = budget = None
        t_rounds, c_rounds = [], []
        for _ in range(a.repeat):
            tr = run_torch(a, model, batch, shape, classes, b)
            t_rounds.append(tr["step_s"])
            t = tr if t is None or tr["step_s"] < t["step_s"] else t
            budget = tr["memory_bytes"] if budget is None else budget
            cr = run_crumb(a, common, batch, budget + loader, persistent)
            if "error" in cr:
                c = cr
                break
            c_rounds.append(cr["step_s"])
            c = cr if c is None or cr["step_s"] < c["step_s"] else c
        t["rounds_s"] = t_rounds
        if "error" not in c:
            c["rounds_s"] = c_rounds
        rows.append({"torch": t, "crumb": c})
        print(f"  {model} b={b}: torch {mib(t['memory_bytes'])} {t['step_s']:.3f} s; crumb "
              + (f"{mib(c['memory_bytes'])} {c['step_s']:.3f} s ({c['plan']})" if "error" not in c else c["error"]),
              file=sys.stderr, flush=True)
    print(f"\n{model}, batch {batch}, input {shape}, BatchNorm over {a.bn_group or batch} samples, {a.threads} threads; "
          f"memory without input buffers (Crumb's loader {mib(loader)} added to its budget)")
    print(f"{'budget':>6}  {'torch memory':>13} {'torch step':>11}  {'crumb memory':>13} {'crumb step':>11}  "
          f"{'memory c/t':>10} {'time c/t':>9}  crumb plan")
    for r in rows:
        t, c = r["torch"], r["crumb"]
        if "error" in c:
            print(f"{t['budget']:>6}  {mib(t['memory_bytes']):>13} {t['step_s']:>9.3f} s  does not fit: {c['error']}")
            continue
        print(f"{t['budget']:>6}  {mib(t['memory_bytes']):>13} {t['step_s']:>9.3f} s  {mib(c['memory_bytes']):>13} "
              f"{c['step_s']:>9.3f} s  {c['memory_bytes'] / t['memory_bytes']:>10.3f} {c['step_s'] / t['step_s']:>9.3f}  "
              f"{c['plan']}, m={c['micro_batch']}, {c['recomputed']} recomputed, {c['swapped']} swapped")
    return {"model": model, "batch": batch, "input": shape, "bn_group": a.bn_group or batch, "loader_bytes": loader,
            "crumb_in_memory_total": in_memory, "points": rows}


def chart(results, path):
    """Step time against memory, one panel per model (plain SVG): each PyTorch budget's point (labelled with
    the budget) joined to Crumb's point at the same memory."""
    w, h, pad, top = 560, 360, 60, 84
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * len(results)}" height="{h}" '
           f'font-family="DejaVu Sans, sans-serif" font-size="12"><rect width="100%" height="100%" fill="#fff"/>']
    for i, r in enumerate(results):
        ox = i * w
        pairs = [(p["torch"], p["crumb"]) for p in r["points"]]
        xmax = max(max(t["memory_bytes"], c.get("memory_bytes", 0)) for t, c in pairs) * 1.1
        ymax = max(max(t["step_s"], c.get("step_s", 0)) for t, c in pairs) * 1.1

        def X(m):
            return ox + pad + m / xmax * (w - pad - 40)

        def Y(s):
            return h - pad + 10 - s / ymax * (h - pad + 10 - top)

        out.append(f'<text x="{ox + 10}" y="20" font-weight="bold">{r["model"]}, batch {r["batch"]}, '
                   f'{r["input"]}: step time against memory</text>')
        for dy, colour, label in ((42, "#e15759", "torch.compile at activation_memory_budget b (labelled)"),
                                  (60, "#4e79a7", "Crumb, train --memory-budget at the same memory")):
            out.append(f'<circle cx="{ox + 16}" cy="{dy - 4}" r="4" fill="{colour}"/>'
                       f'<text x="{ox + 26}" y="{dy}">{label}</text>')
        out.append(f'<line x1="{X(0):.1f}" y1="{Y(0):.1f}" x2="{X(xmax):.1f}" y2="{Y(0):.1f}" stroke="#555"/>')
        out.append(f'<line x1="{X(0):.1f}" y1="{Y(0):.1f}" x2="{X(0):.1f}" y2="{Y(ymax):.1f}" stroke="#555"/>')
        for k in range(6):
            m, s = xmax * k / 5, ymax * k / 5
            out.append(f'<text x="{X(m):.1f}" y="{Y(0) + 16:.1f}" text-anchor="middle">{m / 2**20:.0f} MiB</text>')
            out.append(f'<text x="{X(0) - 6:.1f}" y="{Y(s) + 4:.1f}" text-anchor="end">{s:.1f} s</text>')
        out.append(f'<text x="{X(xmax / 2):.1f}" y="{h - 12}" text-anchor="middle">memory (without input '
                   f'buffers)</text>')
        for t, c in pairs:
            if "error" not in c:
                out.append(f'<line x1="{X(t["memory_bytes"]):.1f}" y1="{Y(t["step_s"]):.1f}" '
                           f'x2="{X(c["memory_bytes"]):.1f}" y2="{Y(c["step_s"]):.1f}" stroke="#bbb"/>')
                out.append(f'<circle cx="{X(c["memory_bytes"]):.1f}" cy="{Y(c["step_s"]):.1f}" r="4" fill="#4e79a7"/>')
            out.append(f'<circle cx="{X(t["memory_bytes"]):.1f}" cy="{Y(t["step_s"]):.1f}" r="4" fill="#e15759"/>'
                       f'<text x="{X(t["memory_bytes"]) + 6:.1f}" y="{Y(t["step_s"]) - 4:.1f}" fill="#e15759" '
                       f'font-size="10">{t["budget"]:g}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default="build/train")
    ap.add_argument("--models", default="resnet20,resnet50")
    ap.add_argument("--batch", type=int, default=128, help="resnet20's batch (3x32x32, 10 classes)")
    ap.add_argument("--resnet50-batch", type=int, default=32)
    ap.add_argument("--resnet50-input", default="3x224x224")
    ap.add_argument("--budgets", default="0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9,1.0")
    ap.add_argument("--bn-group", type=int, default=0, help="Crumb's BatchNorm group (default: the batch, as torch)")
    ap.add_argument("--strategy", default="recompute",
                    help="Crumb's --strategy (recompute: on a CPU a swap pool is more host memory, not less)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=2, help="PyTorch steps before timing (the first compiles)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds per point, the sides in turn; each side's fastest")
    ap.add_argument("--svg", help="write a chart of both here")
    ap.add_argument("--replot", help="only draw --svg from the JSON line a run printed (in this file)")
    # Internal: one PyTorch point in this process.
    ap.add_argument("--torch-point", type=float)
    ap.add_argument("--model")
    ap.add_argument("--input", default="3x32x32")
    ap.add_argument("--classes", type=int, default=10)
    a = ap.parse_args()
    if a.torch_point is not None:
        return torch_point(a)
    if a.replot:
        with open(a.replot) as f:
            return chart(json.loads(f.read().strip().splitlines()[-1])["results"], a.svg)
    if a.repeat < 1 or a.steps < 1:
        ap.error("--repeat and --steps must be at least 1")
    a.budgets = [float(b) for b in a.budgets.split(",")]
    results = []
    for model in a.models.split(","):
        if model == "resnet20":
            results.append(compare(a, model, a.batch, "3x32x32", 10))
        elif model == "resnet50":
            results.append(compare(a, model, a.resnet50_batch, a.resnet50_input, 1000))
        else:
            sys.exit(f"unknown model {model} (resnet20, resnet50)")
    if a.svg:
        chart(results, a.svg)
    print(json.dumps({"bench": "frontier_vs_torch", "threads": a.threads, "steps": a.steps, "repeat": a.repeat,
                      "results": results},
                     separators=(",", ":")))


if __name__ == "__main__":
    main()
