#!/usr/bin/env python3
"""The step at a strategy's least budget against in memory (issue 39: "ResNet-50 batch 32 without host memory
at <= 0.30x the in-memory total for <= 1.35x the in-memory step time").

Reads the least budget of --strategy (recompute by default) from train's error line at a budget nothing meets,
then trains, in turn, in memory with the fused graph (train's default), in memory unfused (--fuse off: the graph
the least plans recompute on where it needs least) and at the least budget, --repeat times over, and keeps each
one's fastest measured step (train's measured_step_s: a core taken by another process only ever adds time). Each
run's line gives the 1-minute load average when it started: the machine may be shared. A table, then one JSON
line.

usage: tools/bench/least_step.py [--train build/train] [--repeat 3] [--limit-train 64] [--strategy recompute]
                                 [--budget BYTES]
                                 [-- TRAIN FLAGS]
default flags: resnet50 on synthetic 3x224x224, 10 classes, batch 32 = one micro-batch of 32.
"""
import argparse
import json
import os
import re
import subprocess
import sys

DEFAULT = ["--model", "resnet50", "--dataset", "synthetic", "--input", "3x224x224", "--classes", "10", "--batch", "32",
           "--micro-batch", "32"]


def least_budget(train, flags, strategy):
    p = subprocess.run([train] + flags + ["--strategy", strategy, "--memory-budget", "1MiB", "--explain"],
                       capture_output=True, text=True)
    m = re.search(r"--memory-budget (\d+) is the least that fits", p.stderr)
    if not m:
        sys.exit(f"no least budget in train's error: {p.stderr.strip()[-2000:]}")
    in_memory = re.search(r"the least each needs: in memory ([\d.]+ \w+)", p.stderr).group(1)
    return int(m.group(1)), in_memory


def train(cmd):
    load = os.getloadavg()[0]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {p.stderr.strip()[-2000:]}")
    j = json.loads(p.stdout.strip().splitlines()[-1])
    j["load"] = load
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default="build/train")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit-train", type=int, default=64, help="samples trained per run")
    ap.add_argument("--strategy", default="recompute")
    ap.add_argument("--budget", type=int, default=0,
                    help="bytes to train the strategy at (default: its least budget): the run takes the fastest plan "
                         "that fits")
    ap.add_argument("flags", nargs="*", help="train's flags (after --)")
    a = ap.parse_args()
    flags = a.flags or DEFAULT
    least, _ = least_budget(a.train, flags, a.strategy)
    budget = a.budget or least
    common = ["--epochs", "1", "--limit-train", str(a.limit_train), "--limit-test", "16"]
    configs = [("in memory, fused", flags + ["--memory-budget", "64GiB"]),
               ("in memory, --fuse off", flags + ["--memory-budget", "64GiB", "--fuse", "off"]),
               (f"{a.strategy} at {budget}", flags + ["--strategy", a.strategy, "--memory-budget", str(budget)])]
    runs = {name: [] for name, _ in configs}
    for r in range(a.repeat):
        for name, f in configs:
            j = train([a.train] + f + common)
            runs[name].append(j)
            print(f"round {r + 1}: {name:<24} step {j['measured_step_s'] * 1e3:9.1f} ms  predicted "
                  f"{j['predicted_step_s'] * 1e3:9.1f} ms  arena {j['arena_bytes']}  load {j['load']:.2f}", flush=True)
    best = {name: min(js, key=lambda j: j["measured_step_s"]) for name, js in runs.items()}
    base = best["in memory, fused"]["measured_step_s"]
    unfused = best["in memory, --fuse off"]["measured_step_s"]
    print(f"least budget of --strategy {a.strategy}: {least} bytes; trained at {budget}")
    print(f"{'run':<24} {'fastest step':>13} {'x fused':>8} {'x unfused':>10}  {'load':>5}  final_loss")
    for name, j in best.items():
        s = j["measured_step_s"]
        print(f"{name:<24} {s * 1e3:10.1f} ms {s / base:8.3f} {s / unfused:10.3f}  {j['load']:5.2f}  {j['final_loss']}")
    print(json.dumps({"bench": "least_step", "flags": flags, "strategy": a.strategy, "least_budget": least,
                      "budget": budget,
                      "runs": {name: [{k: j[k] for k in ("measured_step_s", "predicted_step_s", "arena_bytes", "load",
                                                         "final_loss", "recomputed")} for j in js]
                               for name, js in runs.items()}}, separators=(",", ":")))


if __name__ == "__main__":
    main()
