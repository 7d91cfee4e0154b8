#!/usr/bin/env python3
"""What swapping and recomputation buy on this machine: for a model at a fixed micro-batch m (one BatchNorm
group of 32 by default), the smallest memory budget each strategy fits, and the step time it then takes,
measured by a short training run at that budget, against the in-memory plan.

The minima come from train's own error line for a budget nothing fits ("the least each needs: ..."); each
strategy then trains at 2% above its minimum, or 5% or 10% where that does not fit on the run (the
choice follows measured kernel times, which vary from run to run); auto also at recompute's minimum,
where it may choose. A step is one micro-batch's forward and backward (train's measured_step_s).

usage: tools/bench/strategy_bench.py [--train build/train] [--models resnet20,resnet50] [--repeat 2]
         [--device cpu|cuda] [--input 3x112x112]   (--input: resnet50's synthetic image shape)
"""
import argparse
import json
import re
import subprocess
import sys

MODELS = {
    # Fashion-MNIST, 28x28: the reference CNN of issue 15.
    "resnet20": ["--model", "resnet20", "--limit-train", "128", "--limit-test", "32"],
    # Synthetic 3x112x112: ResNet-50's layout at a size a 2-core CPU trains a step of 32 in seconds.
    "resnet50": ["--model", "resnet50", "--dataset", "synthetic", "--input", "3x112x112", "--classes", "10",
                 "--limit-train", "64", "--limit-test", "32"],
}
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(text):
    number, unit = text.split()
    return float(number) * UNITS[unit]


def run(train, args):
    p = subprocess.run([train] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def minima(train, common):
    code, _, err = run(train, common + ["--memory-budget", "64KiB", "--explain"])
    line = err.strip().splitlines()[-1] if err.strip() else ""
    m = re.search(r"the least each needs: (.*) \(raise", line)
    if code == 0 or not m:
        sys.exit("expected train to name each strategy's minimum, got: " + line)
    out = {}
    for part in m.group(1).split(", "):
        name, size = part.rsplit(" ", 2)[0], " ".join(part.rsplit(" ", 2)[1:])
        out[name] = parse_size(size)
    return out


def measure(train, common, strategy, least, repeat):
    """The fastest of `repeat` runs at 2% above `least`, or 5% or 10% where the choice, which follows
    measured kernel times, does not fit there on this run. Returns the run's JSON and the budget."""
    best = None
    for _ in range(repeat):
        for factor in (1.02, 1.05, 1.10):
            budget = least * factor
            code, out, err = run(train, common + ["--strategy", strategy, "--memory-budget", str(int(budget)),
                                                  "--epochs", "1"])
            if code == 0:
                break
        if code != 0:
            sys.exit(f"--strategy {strategy} at {budget / 2**20:.2f} MiB failed: {err.strip().splitlines()[-1]}")
        j = json.loads(out.strip().splitlines()[-1])
        j["budget"] = budget
        if best is None or j["measured_step_s"] < best["measured_step_s"]:
            best = j
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default="build/train")
    ap.add_argument("--models", default="resnet20,resnet50")
    ap.add_argument("--micro-batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2, help="runs per strategy; the fastest step is kept")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--input", default="3x112x112", help="resnet50's synthetic image shape")
    a = ap.parse_args()
    MODELS["resnet50"][MODELS["resnet50"].index("--input") + 1] = a.input
    rows = []
    for model in a.models.split(","):
        common = MODELS[model] + ["--batch", str(a.micro_batch), "--micro-batch", str(a.micro_batch),
                                  "--threads", str(a.threads), "--device", a.device]
        least = minima(a.train, common)
        in_memory = measure(a.train, common, "none", least["in memory"], a.repeat)
        base = in_memory["measured_step_s"]
        rows.append((model, "in memory", least["in memory"], in_memory, base))
        # auto twice: where only the most frugal choice fits, and where recomputing alone would also fit.
        for strategy, key in (("swap", "swap"), ("recompute", "recompute"), ("auto", "auto"),
                              ("auto", "recompute")):
            rows.append((model, strategy, least[key], measure(a.train, common, strategy, least[key], a.repeat), base))
    print(f"{'model':9} {'strategy':10} {'least':>13} {'vs memory':>9} {'ran at':>9} {'swapped':>7} {'recomp.':>7} "
          f"{'host pool':>10} {'step ms':>8} {'predicted':>9} {'vs memory':>9}")
    for model, strategy, budget, j, base in rows:
        mem = rows[[r[0] for r in rows].index(model)][2]
        print(f"{model:9} {strategy:10} {budget / 2**20:10.2f} MiB {budget / mem:9.3f} {j['budget'] / budget:9.2f} "
              f"{j['swapped']:7d} "
              f"{j['recomputed']:7d} {j['host_pool_bytes'] / 2**20:6.2f} MiB {j['measured_step_s'] * 1e3:8.1f} "
              f"{j['predicted_step_s'] * 1e3:9.1f} {j['measured_step_s'] / base:9.3f}")
    print(json.dumps({"strategy_bench": [
        {"model": m, "strategy": s, "least_budget": int(b), "ran_at_budget": int(j["budget"]),
         "measured_step_s": j["measured_step_s"],
         "predicted_step_s": j["predicted_step_s"], "in_memory_step_s": base, "swapped": j["swapped"],
         "recomputed": j["recomputed"], "host_pool_bytes": j["host_pool_bytes"], "strategy_used": j["strategy_used"]}
        for m, s, b, j, base in rows]}))


if __name__ == "__main__":
    main()
