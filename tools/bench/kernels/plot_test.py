#!/usr/bin/env python3
"""CTest KernelsBenchPlot: plot.py turns kernels_bench's JSON (argv[1]) into well-formed SVG with one bar
per benchmark that reports a % of peak."""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def main():
    results = sys.argv[1]
    with open(results) as f:
        expected = {b["run_name"] for b in json.load(f)["benchmarks"] if "pct_peak" in b}
    assert expected, f"{results} holds no benchmark with pct_peak"
    plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot.py")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "kernels.svg")
        subprocess.run([sys.executable, plot, results, "-o", out], check=True)
        root = ET.parse(out).getroot()  # raises on malformed XML
    assert root.tag == SVG + "svg", root.tag
    bars = [r for r in root.iter(SVG + "rect") if r.get("class") == "bar"]
    assert len(bars) == len(expected), f"{len(bars)} bars for {len(expected)} benchmarks"
    for bar in bars:
        assert float(bar.get("width")) >= 0
        assert bar.find(SVG + "title") is not None, "every bar carries its figures as a tooltip"
    print(f"plot_test: {len(bars)} bars, well-formed SVG")


if __name__ == "__main__":
    main()
