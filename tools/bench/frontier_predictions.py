#!/usr/bin/env python3
"""Does the frontier's predicted step hold? (issue 39, "predictions that hold")

Runs `train --explain --frontier --report-dir` for a model at a fixed micro-batch, reads the points from
its frontier.csv (exact bytes and predicted seconds), picks --points of them spread from the least memory to
in memory, and trains at each point's memory as --memory-budget. For each it prints the frontier's predicted
step (one micro-batch's forward and backward), the training run's own prediction for the plan it ran (its
kernel times are measured again, so it may choose another plan at that budget: its recomputed count is
shown beside the point's), and the measured step (train's measured_step_s, the mean over the run), with the
error of each prediction. A table, then one JSON line, with the load average before and after (the kernel
times and the steps are both wall-clock times on cores other processes may share: read them on a quiet machine).

usage: tools/bench/frontier_predictions.py [--train build/train] [--points 5] [--repeat 1] [--limit-train 256]
                                         [-- TRAIN FLAGS]
default flags: resnet20 on synthetic 3x32x32, batch 32, micro-batch 8, BatchNorm groups of 8, recompute only.
The frontier is read at --memory-budget 64GiB (a limit, not an allocation: any model's in-memory plan fits).
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

DEFAULT = ["--model", "resnet20", "--dataset", "synthetic", "--input", "3x32x32", "--batch", "32", "--micro-batch",
           "8", "--bn-group", "8", "--strategy", "recompute"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {p.stderr.strip()[-2000:]}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", default="build/train")
    ap.add_argument("--points", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1,
                    help="frontier runs (the one predicting the fastest in-memory step is kept) and training runs per "
                         "point (the fastest is kept)")
    ap.add_argument("--limit-train", type=int, default=256, help="samples trained per run")
    ap.add_argument("flags", nargs="*", help="train's flags (after --)")
    a = ap.parse_args()
    flags = a.flags or DEFAULT
    load_before = os.getloadavg()
    frontier = None
    for _ in range(a.repeat):  # the frontier of the run whose in-memory step was predicted fastest: the least disturbed
        with tempfile.TemporaryDirectory() as tmp:
            run([a.train] + flags + ["--memory-budget", "64GiB", "--frontier", "--report-dir", tmp])
            with open(os.path.join(tmp, "frontier.csv"), newline="") as f:
                points = list(csv.DictReader(f))
        if frontier is None or float(points[-1]["step_seconds"]) < float(frontier[-1]["step_seconds"]):
            frontier = points
    n = len(frontier)
    picks = sorted({round(i * (n - 1) / (a.points - 1)) for i in range(a.points)}) if a.points > 1 else [n - 1]
    rows = []
    for i in picks:
        point = frontier[i]
        best = None
        for _ in range(a.repeat):
            out = run([a.train] + flags + ["--memory-budget", point["memory_bytes"], "--epochs", "1", "--limit-train",
                                            str(a.limit_train), "--limit-test", "16"])
            j = json.loads(out.strip().splitlines()[-1])
            if best is None or j["measured_step_s"] < best["measured_step_s"]:
                best = j
        predicted = float(point["step_seconds"])
        measured = best["measured_step_s"]
        rows.append({"memory_bytes": int(point["memory_bytes"]), "memory": point["memory"], "plan": point["plan"],
                     "point_recomputed": int(point["recomputed"].split()[0]), "predicted_s": predicted,
                     "run_recomputed": best["recomputed"], "run_predicted_s": best["predicted_step_s"],
                     "measured_s": measured, "error": predicted / measured - 1,
                     "run_error": best["predicted_step_s"] / measured - 1 if best["predicted_step_s"] else None})
    load_after = os.getloadavg()
    print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after (1 minute)")
    print(f"{'memory':>12}  {'plan':<10} {'recomputed':>10}  {'predicted':>10}  {'run predicted':>13}  "
          f"{'measured':>9}  {'error':>7}  {'run error':>9}")
    for r in rows:
        run_err = f"{100 * r['run_error']:+8.1f}%" if r["run_error"] is not None else f"{'-':>9}"
        print(f"{r['memory']:>12}  {r['plan']:<10} {r['point_recomputed']:>4} / {r['run_recomputed']:<3}  "
              f"{r['predicted_s'] * 1e3:>7.1f} ms  {r['run_predicted_s'] * 1e3:>10.1f} ms  {r['measured_s'] * 1e3:>6.1f} ms"
              f"  {100 * r['error']:+6.1f}%  {run_err}")
    print(json.dumps({"bench": "frontier_predictions", "flags": flags, "points": rows,
                      "load_before": load_before[0], "load_after": load_after[0]}, separators=(",", ":")))


if __name__ == "__main__":
    main()
