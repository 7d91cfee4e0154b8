#!/usr/bin/env python3
"""Each fused normalisation kernel of kernels_bench's model suites beside the unfused ops it replaces, at
the same shape: their CPU times, the fused one's GB/s and % of the copy ceiling, and the time of the pass
fusion removes (ReLU's forward or backward), against which "faster by that pass" is judged.

usage: fused_pairs.py RESULTS.json [MORE.json ...]
       fused_pairs.py --bench build/kernels_bench [--suites resnet20_28,resnet18_28] [--rounds 3] [--cold]
                      [--min-time 0.1] [--repetitions 3] [--json-out DIR]

Every figure is the least CPU time (us) over all repetitions of all files or rounds: on a machine shared
with other work the least is what the kernel takes when it is let run. Run at one thread
(OMP_NUM_THREADS=1), where CPU time is all of the kernel's. Standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

# fused op -> the unfused ops it replaces, and the one of them whose pass fusion removes.
CHAINS = {
    "batch_norm_relu": (["batch_norm", "relu"], "relu"),
    "batch_norm_add_relu": (["batch_norm", "add", "relu"], "relu"),
    "batch_norm_relu_backward": (["relu_backward", "batch_norm_backward"], "relu_backward"),
    "batch_norm_add_relu_backward": (["relu_backward", "batch_norm_backward"], "relu_backward"),
    "group_norm_relu": (["group_norm", "relu"], "relu"),
    "group_norm_add_relu": (["group_norm", "add", "relu"], "relu"),
    "group_norm_relu_backward": (["relu_backward", "group_norm_backward"], "relu_backward"),
    "group_norm_add_relu_backward": (["relu_backward", "group_norm_backward"], "relu_backward"),
}
UNFUSED = sorted({op for ops, _ in CHAINS.values() for op in ops})


def rows_of(paths):
    """{(op, suite, shape): {"cpu": least us, "gbs": GB/s at that run, "copy": pct_copy, "layer": ...}}."""
    best = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        for b in data.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
                continue
            parts = b.get("run_name", b["name"]).split("/")
            if len(parts) < 4 or parts[0] != "cpu":
                continue
            shape = b.get("label", "").split(" ")[0]  # the first input: x, or dy
            scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b.get("time_unit", "ns")]
            key = (parts[1], parts[2], shape)
            row = {"cpu": b["cpu_time"] * scale, "gbs": b.get("GB/s"), "copy": b.get("pct_copy"), "layer": parts[3]}
            if key not in best or row["cpu"] < best[key]["cpu"]:
                best[key] = row
    return best


def table(best):
    lines = ["| suite | fused op (layer) | shape | unfused ops (us) | unfused | fused | fused / unfused | "
             "removed pass | unfused - removed | fused GB/s | % of copy |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (op, suite, shape), f in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        if op not in CHAINS:
            continue
        ops, removed = CHAINS[op]
        parts = [best.get((o, suite, shape)) for o in ops]
        if any(p is None for p in parts):
            continue
        unfused = sum(p["cpu"] for p in parts)
        gone = best[(removed, suite, shape)]["cpu"]
        lines.append(f"| {suite} | {op} ({f['layer']}) | {shape} | "
                     + " + ".join(f"{o} {p['cpu']:.0f}" for o, p in zip(ops, parts))
                     + f" | {unfused:.0f} | {f['cpu']:.0f} | {f['cpu'] / unfused:.2f} | {gone:.0f} | "
                     f"{unfused - gone:.0f} | {f['gbs'] or 0:.1f} | {f['copy'] or 0:.0f} |")
    return "\n".join(lines)


def run(args, out_dir):
    ops = "|".join(re.escape(o) for o in sorted(set(CHAINS) | set(UNFUSED)))
    paths = []
    for r in range(args.rounds):
        path = os.path.join(out_dir, f"round{r}.json")
        cmd = [args.bench, "--device=cpu", f"--suites={args.suites}", "--ceiling_seconds=0.5",
               f"--benchmark_filter=^cpu/({ops})/", f"--benchmark_min_time={args.min_time}",
               f"--benchmark_repetitions={args.repetitions}", "--benchmark_enable_random_interleaving=true",
               f"--benchmark_out={path}", "--benchmark_out_format=json"] + (["--cold"] if args.cold else [])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        paths.append(path)
    return paths


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", nargs="*")
    p.add_argument("--bench")
    p.add_argument("--suites", default="resnet20_28,resnet18_28")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--min-time", default="0.1")
    p.add_argument("--cold", action="store_true")
    p.add_argument("--json-out", help="keep the rounds' JSON in this folder")
    args = p.parse_args()
    if bool(args.json) == bool(args.bench):
        sys.exit("fused_pairs.py: give RESULTS.json files or --bench BINARY, not both")
    if args.bench:
        if args.json_out:
            os.makedirs(args.json_out, exist_ok=True)
            args.json = run(args, args.json_out)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                print(table(rows_of(run(args, tmp))))
            return
    print(table(rows_of(args.json)))


if __name__ == "__main__":
    main()
