#!/usr/bin/env python3
"""CTest KernelsBenchFusedPairs: fused_pairs.py pairs every fused normalisation kernel in kernels_bench's JSON
(argv[1]) with the unfused ops it replaces at its shape, and its figures add up: the unfused time is the
sum of the parts, the ratio is fused over unfused; every streaming kernel reports pct_copy."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fused_pairs  # noqa: E402


def main():
    results = sys.argv[1]
    with open(results) as f:
        data = json.load(f)
    streaming = [b for b in data["benchmarks"] if "GB/s" in b]
    assert streaming, f"{results} holds no streaming kernel"
    for b in streaming:
        assert "pct_copy" in b, f"{b['name']} has no pct_copy"
    best = fused_pairs.rows_of([results])
    fused = {k for k in best if k[0] in fused_pairs.CHAINS}
    assert fused, f"{results} holds no fused normalisation kernel"
    out = subprocess.run([sys.executable, fused_pairs.__file__, results], check=True, capture_output=True,
                         text=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == len(fused), f"{len(rows)} rows for {len(fused)} fused kernels:\n{out}"
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split("|")]
        suite, op, shape = cells[0], cells[1].split(" ")[0], cells[2]
        unfused, fused_us, ratio = float(cells[4]), float(cells[5]), float(cells[6])
        parts = [best[(o, suite, shape)]["cpu"] for o in fused_pairs.CHAINS[op][0]]
        assert abs(unfused - sum(parts)) <= 1, line
        assert abs(fused_us - best[(op, suite, shape)]["cpu"]) <= 1, line
        assert abs(ratio - fused_us / unfused) <= 0.01 + 1 / unfused, line
    print(f"fused_pairs_test: {len(rows)} fused kernels paired")


if __name__ == "__main__":
    main()
