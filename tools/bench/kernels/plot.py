#!/usr/bin/env python3
"""Plots kernels_bench's Google Benchmark JSON as an SVG: % of peak per op and shape, one panel per
device and suite (model), bars coloured by what the op is judged against (GEMM ceiling or memory
bandwidth). Standard library only, so it runs wherever the benchmark does.

usage: plot.py RESULTS.json -o OUT.svg [--device cpu|cuda] [--suite NAME ...]
"""
import argparse
import json
import statistics
import sys
from xml.sax.saxutils import escape

ROW = 14          # px per bar
CHAR_W = 5.8      # px per character of a 10 px sans-serif label, generously (no font metrics here)
PLOT_W = 420      # px for 0..scale %
MARGIN = 12
COLOURS = {"compute": "#3b6fb6", "memory": "#e08a2c"}
RATE_UNITS = ("TFLOP/s", "GFLOP/s", "GB/s")


def load(path):
    """The JSON's context and one row per benchmark (median over repetitions, if any)."""
    with open(path) as f:
        data = json.load(f)
    runs = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or "pct_peak" not in b or b.get("error_occurred"):
            continue
        runs.setdefault(b.get("run_name", b["name"]), []).append(b)
    rows = []
    for name, reps in runs.items():
        # Google Benchmark appends the timer to the name; it says nothing about the kernel.
        parts = [p for p in name.split("/") if p not in ("real_time", "manual_time")]
        if len(parts) < 4:
            raise SystemExit(f"plot.py: unexpected benchmark name '{name}' (want device/op/suite/layer[/impl])")
        unit = next((u for u in RATE_UNITS if u in reps[0]), None)
        rows.append({
            "device": parts[0], "kernel": parts[1], "suite": parts[2], "layer": parts[3],
            "impl": parts[4] if len(parts) > 4 else "",
            "pct": statistics.median(r["pct_peak"] for r in reps),
            "rate": statistics.median(r[unit] for r in reps) if unit else None, "unit": unit or "",
            "time": statistics.median(r["real_time"] for r in reps), "time_unit": reps[0].get("time_unit", ""),
            "shape": reps[0].get("label", ""),
            "kind": "memory" if unit == "GB/s" else "compute",
        })
    return data.get("context", {}), rows


def panels(rows):
    """Rows grouped by (device, suite), in the order the benchmarks ran."""
    out = {}
    for r in rows:
        out.setdefault((r["device"], r["suite"]), []).append(r)
    return out


def bar_label(r):
    return f'{r["kernel"]} {r["layer"]}' + (f' [{r["impl"]}]' if r["impl"] else "")


def render(context, rows):
    groups = panels(rows)
    # The axis ends at 100 % unless something went beyond (cache-resident tensors beat DRAM bandwidth).
    scale = max([100.0] + [r["pct"] for r in rows])
    scale = 25 * -(-scale // 25)
    x0 = MARGIN + CHAR_W * max(len(bar_label(r)) for r in rows) + 6
    out = []
    y = MARGIN

    def text(x, y, s, anchor="start", size=11, weight="normal"):
        out.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                   f'font-weight="{weight}">{escape(s)}</text>')

    text(MARGIN, y + 14, "Crumb kernels: % of peak", size=15, weight="bold")
    y += 22
    peaks = []
    if "cpu_peak_GFLOP/s" in context:
        peaks.append(f'CPU: GEMM {float(context["cpu_peak_GFLOP/s"]):.1f} GFLOP/s, '
                     f'triad {float(context["cpu_peak_GB/s"]):.1f} GB/s (measured, {context.get("cpu_threads", "?")} threads)')
    if "cuda_peak_source" in context:
        peaks.append("CUDA: " + context["cuda_peak_source"])
    for line in peaks:
        text(MARGIN, y + 12, line, size=10)
        y += 14
    for colour_kind, label in (("compute", "GEMM-like (FLOP/s vs GEMM peak)"), ("memory", "memory-bound (bytes/s vs bandwidth)")):
        out.append(f'<rect x="{MARGIN}" y="{y + 4}" width="10" height="10" fill="{COLOURS[colour_kind]}"/>')
        text(MARGIN + 14, y + 13, label, size=10)
        y += 14
    y += 6
    for (device, suite), members in groups.items():
        text(MARGIN, y + 14, f"{device} / {suite}", size=13, weight="bold")
        y += 20
        top = y
        for r in members:
            name = bar_label(r)
            text(x0 - 6, y + ROW - 4, name, anchor="end", size=10)
            width = PLOT_W * r["pct"] / scale
            rate = f'{r["rate"]:.3g} {r["unit"]}, ' if r["rate"] is not None else ""
            tip = f'{name}: {r["shape"]}; {r["time"]:.4g} {r["time_unit"]}, {rate}{r["pct"]:.1f} % of peak'
            out.append(f'<rect class="bar" x="{x0:.1f}" y="{y + 2}" width="{width:.2f}" height="{ROW - 4}" '
                       f'fill="{COLOURS[r["kind"]]}"><title>{escape(tip)}</title></rect>')
            text(x0 + width + 4, y + ROW - 4, f'{r["pct"]:.1f}', size=9)
            y += ROW
        # Gridlines every 25 %, the 100 % line darker.
        for pct in range(0, int(scale) + 1, 25):
            x = x0 + PLOT_W * pct / scale
            colour = "#444" if pct == 100 else "#ccc"
            out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{y}" stroke="{colour}" stroke-width="0.6"/>')
            text(x, y + 11, f"{pct}%", anchor="middle", size=9)
        y += 22
    width = int(x0 + PLOT_W + 60)
    height = y + MARGIN
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif">')
    return "\n".join([head, f'<rect width="{width}" height="{height}" fill="white"/>'] + out + ["</svg>"]) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="kernels_bench --benchmark_out=FILE --benchmark_out_format=json")
    ap.add_argument("-o", "--output", required=True, help="SVG file to write")
    ap.add_argument("--device", choices=("cpu", "cuda"), help="only this device's benchmarks")
    ap.add_argument("--suite", action="append", help="only this suite (repeatable)")
    args = ap.parse_args(argv)
    context, rows = load(args.json)
    rows = [r for r in rows if (not args.device or r["device"] == args.device)
            and (not args.suite or r["suite"] in args.suite)]
    if not rows:
        sys.exit(f"plot.py: no benchmark with a pct_peak counter in {args.json} (after the filters)")
    with open(args.output, "w") as f:
        f.write(render(context, rows))
    print(f"plot.py: {len(rows)} bars -> {args.output}")


if __name__ == "__main__":
    main()
