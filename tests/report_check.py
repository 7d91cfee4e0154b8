#!/usr/bin/env python3
"""Reads `train --report` the way a person checks a picture, with only the standard library.

For a few models and plans it runs `train ... --report R.html --report-dir D`, parses the HTML and every
SVG with a real XML parser, and checks that:
  - the document is self-contained (no script, no link to anything outside it);
  - every block rectangle of the arena map lies inside the arena, both in bytes (0 <= offset,
    offset + bytes <= arena) and in pixels (inside the frame, at the height its offset gives);
  - no two blocks that are live at the same step overlap in address;
  - the blocks live at each step add up to the timeline's live bytes, and the timeline's highest point is
    the lower bound;
  - the totals shown (the breakdown table, the sweep's bar of the chosen micro-batch) equal those that
    `--explain` prints, dtypes included;
  - every block names its dtype (16-bit ones in bf16 and fp16), and a 16-bit run shows its parameter copies;
  - the folder's SVG files are the pictures inlined in the HTML, and its CSV files have a row per item;
  - with --frontier, the frontier picture's points (read back from its circles' pixels, through the axes'
    ends) and its table are the points `--explain --frontier` printed, the budget's point marked on both.
Usage: report_check.py --train build/train
"""
import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"
XHTML = "{http://www.w3.org/1999/xhtml}"
EPS = 0.02  # pixels: coordinates are written with two decimals

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


def run(train, args):
    r = subprocess.run([train] + args, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"train {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


def explain_numbers(stdout):
    """The breakdown lines of --explain as {label: size} and the arena plan line."""
    rows = {}
    breakdown = stdout[stdout.index("memory for micro-batch"):stdout.index("arena plan (training)")]
    for line in breakdown.splitlines():
        m = re.match(r"^  (\S.*?)\s{2,}([\d.]+ (?:B|KiB|MiB|GiB))(?:  ([A-Z][A-Z0-9]*))?(?:\s+\(.*\))?$", line)
        if m:
            rows[m.group(1).strip()] = (m.group(2), m.group(3) or "")
    plan = re.search(r"arena plan \(training\): (\S+ \S+) for a lower bound of (\S+ \S+) .*ratio ([\d.]+)", stdout)
    return rows, plan.groups()


def table(root, table_id):
    t = root.find(f".//{XHTML}table[@id='{table_id}']")
    header = [th.text or "" for th in t.find(f"{XHTML}thead").iter(f"{XHTML}th")]
    return [dict(zip(header, [td.text or "" for td in tr.iter(f"{XHTML}td")]))
            for tr in t.find(f"{XHTML}tbody").iter(f"{XHTML}tr")]


def frontier_lines(stdout):
    """--explain --frontier's table: (memory, step ms, plan, marked) per line."""
    lines = stdout[stdout.index("memory-time frontier at micro-batch"):].splitlines()[2:]
    rows = []
    for line in lines:
        m = re.match(r"^\s+([\d.]+ (?:B|KiB|MiB|GiB))\s+[\d.]+\s+([\d.]+) ms\s+[\d.]+  "
                     r"(\S+(?: memory)?)\s.*?(<- the budget's)?$", line)
        if not m:
            break
        rows.append((m.group(1), float(m.group(2)), m.group(3), bool(m.group(4))))
    return rows


def check_frontier(root, svg, stdout, folder, name):
    printed = frontier_lines(stdout)
    rows = table(root, "frontier")
    check(len(printed) >= 2 and len(rows) == len(printed),
          f"{name}: --frontier printed {len(printed)} points, the report's table has {len(rows)}")
    left, top, width, height = map(float, svg.get("data-frame").split())
    x_max, y_max = float(svg.get("data-x-max")), float(svg.get("data-y-max-ms"))
    points = [c for c in svg.iter(f"{SVG}circle") if c.get("class") == "point"]
    check(len(points) == len(printed), f"{name}: the frontier picture has {len(points)} points, not {len(printed)}")
    previous = None
    for (memory, ms, plan, marked), row, c in zip(printed, rows, points):
        where = f"{name}: frontier point {memory}"
        check(row["memory"] == memory and row["step"] == f"{ms:.2f} ms" and row["plan"] == plan and
              (row["budget's"] == "yes") == marked, f"{where}: the table says {row}, --frontier {memory} {ms} {plan}")
        total, seconds = int(c.get("data-total")), float(c.get("data-seconds"))
        check(total == int(row["memory_bytes"]) and abs(seconds - float(row["step_seconds"])) < 1e-9 and
              f"{seconds * 1e3:.2f}" == f"{ms:.2f}" and c.get("data-plan") == plan,
              f"{where}: the picture's point ({total} bytes, {seconds} s) is not the table's")
        # Where it is drawn: memory across from 0 at the left, time up from 0 at the bottom.
        cx, cy = float(c.get("cx")), float(c.get("cy"))
        check(abs(cx - (left + total / x_max * width)) <= EPS and
              abs(cy - (top + height - seconds * 1e3 / y_max * height)) <= EPS,
              f"{where}: drawn at ({cx}, {cy}), not where its memory and time put it")
        if previous:
            check(total > previous[0] and seconds < previous[1], f"{where}: not less time for more memory")
        previous = (total, seconds)
    check(sum(m for *_, m in printed) == 1 and int(svg.get("data-marked")) == [m for *_, m in printed].index(True),
          f"{name}: the picture marks point {svg.get('data-marked')}, --frontier another")
    budget = int(svg.get("data-budget"))
    lines = [l for l in svg.iter(f"{SVG}line") if l.get("class") == "budget"]
    check(len(lines) == 1 and abs(float(lines[0].get("x1")) - (left + budget / x_max * width)) <= EPS,
          f"{name}: the budget line is not at {budget} bytes")
    with open(os.path.join(folder, "frontier.csv"), newline="") as f:
        check([r["memory_bytes"] for r in csv.DictReader(f)] == [r["memory_bytes"] for r in rows],
              f"{name}: frontier.csv and the report's table differ")


def check_arena_map(svg, name):
    arena = int(svg.get("data-arena-bytes"))
    left, top, width, height = map(float, svg.get("data-frame").split())
    blocks = []
    for r in svg.iter(f"{SVG}rect"):
        if r.get("class") != "block":
            continue
        off, size = int(r.get("data-offset")), int(r.get("data-bytes"))
        first, last = int(r.get("data-first")), int(r.get("data-last"))
        blocks.append((off, size, first, last, r.get("data-role"), r.get("data-dtype")))
        where = f"{name}: block at offset {off} ({size} bytes, steps {first}-{last})"
        check(0 <= off and off + size <= arena and size > 0, f"{where} is outside the arena of {arena} bytes")
        check(0 <= first <= last, f"{where}: bad lifetime")
        x, y, w, h = (float(r.get(k)) for k in ("x", "y", "width", "height"))
        check(x >= left - EPS and x + w <= left + width + EPS and y >= top - EPS and y + h <= top + height + EPS,
              f"{where}: its rectangle leaves the frame")
        check(abs(y + h - (top + height - off / arena * height)) <= EPS and abs(h - size / arena * height) <= EPS,
              f"{where}: drawn at the wrong height")
        title = r.find(f"{SVG}title")
        check(title is not None and str(size) in title.text and f"offset {off}" in title.text,
              f"{where}: hover text lacks its size or offset")
    check(blocks, f"{name}: no blocks")
    by_offset = sorted(blocks)
    for i, a in enumerate(by_offset):
        for b in by_offset[i + 1:]:
            if b[0] >= a[0] + a[1]:
                break
            check(a[3] < b[2] or b[3] < a[2], f"{name}: blocks {a} and {b} are live at once and overlap")
    return blocks, arena


def check_report(train, args, expect_trials=False):
    name = " ".join(args)
    with tempfile.TemporaryDirectory() as tmp:
        html_path, folder = os.path.join(tmp, "r.html"), os.path.join(tmp, "pictures")
        stdout = run(train, args + ["--report", html_path, "--report-dir", folder])
        text = open(html_path, encoding="utf-8").read()
        root = ET.fromstring(text)  # the whole document, not just its pictures, is XML
        check(root.tag == f"{XHTML}html", f"{name}: the root is not XHTML's html")
        check(root.find(f".//{XHTML}script") is None, f"{name}: the report has a script")
        check(not re.search(r"\b(?:href|src)=", text), f"{name}: the report links to something")
        check(not re.search(r"https?://(?!www\.w3\.org/)", text), f"{name}: the report names a web address")
        svgs = {s.get("id"): s for s in root.iter(f"{SVG}svg")}
        frontier = "--frontier" in args
        want = {"arena-map", "timeline", "sweep"} | ({"throughput"} if expect_trials else set()) | (
            {"frontier"} if frontier else set())
        check(set(svgs) == want, f"{name}: pictures {sorted(svgs)}, expected {sorted(want)}")

        blocks, arena = check_arena_map(svgs["arena-map"], name)

        # Every block names the dtype it stores, in the table and the picture: the precision's 16-bit
        # dtype for activations in bf16 and fp16, float32 for the gradients of float32 parameters.
        rows = table(root, "blocks")
        check(len(rows) == len(blocks) and all(r["dtype"] == b[5] for r, b in zip(rows, blocks)),
              f"{name}: the blocks table and the map disagree on dtypes")
        precision = args[args.index("--precision") + 1] if "--precision" in args else "fp32"
        half = {"bf16": "BF16", "fp16": "F16"}.get(precision)
        dtypes = {b[5] for b in blocks if b[4] != "workspace"}
        check(all(b[5] == "bytes" for b in blocks if b[4] == "workspace"), f"{name}: a workspace block has a dtype")
        check(half in dtypes if half else "BF16" not in dtypes and "F16" not in dtypes,
              f"{name}: blocks store {sorted(dtypes)} in {precision}")
        check(f", {precision}" in root.find(f".//{XHTML}h1").text, f"{name}: the title does not name {precision}")
        parts = [row["part"].strip() for row in table(root, "breakdown")]
        check(("parameter copies" in parts) == bool(half), f"{name}: parameter copies {parts}")

        # The timeline: blocks live at each step add up to its live bytes and workspace.
        steps = [s for s in svgs["timeline"].iter(f"{SVG}rect") if s.get("class") == "step"]
        check(len(steps) == int(svgs["arena-map"].get("data-steps")), f"{name}: timeline and map disagree on steps")
        highest = 0
        for i, s in enumerate(steps):
            live = sum(b[1] for b in blocks if b[2] <= i <= b[3] and b[4] != "workspace")
            ws = sum(b[1] for b in blocks if b[2] <= i <= b[3] and b[4] == "workspace")
            check(live == int(s.get("data-live")) and ws == int(s.get("data-workspace")),
                  f"{name}: step {i}: blocks hold {live} + {ws} bytes, the timeline says "
                  f"{s.get('data-live')} + {s.get('data-workspace')}")
            highest = max(highest, live + ws)
        lower_bound = int(svgs["timeline"].get("data-lower-bound"))
        check(highest == lower_bound, f"{name}: timeline peaks at {highest}, lower bound is {lower_bound}")
        check(int(svgs["timeline"].get("data-arena-bytes")) == arena, f"{name}: timeline and map arenas differ")

        # The totals shown are --explain's (for a training run: of the same flags, without the trials).
        if "--explain" not in args:
            at = args.index("--sweep") if "--sweep" in args else len(args)
            stdout = run(train, args[:at] + args[at + 2:] + ["--explain"])
        explained, (plan_arena, plan_bound, plan_ratio) = explain_numbers(stdout)
        shown = {row["part"].strip(): row for row in table(root, "breakdown")}
        check(len(explained) >= 7, f"{name}: only {len(explained)} breakdown lines read from --explain")
        for label, (size, dtype) in explained.items():
            check(label in shown and shown[label]["size"] == size and shown[label]["dtype"] == dtype,
                  f"{name}: --explain says {label} = {size} {dtype}, the report {shown.get(label)}")
        check(shown["arena plan (training)"]["size"] == plan_arena and shown["lower bound (training)"]["size"] ==
              plan_bound and shown["ratio"]["size"] == plan_ratio, f"{name}: arena plan line differs from --explain")
        check(int(shown["arena plan (training)"]["bytes"]) == arena and
              int(shown["lower bound (training)"]["bytes"]) == lower_bound, f"{name}: breakdown and pictures differ")
        total = int(shown["total"]["bytes"])
        chosen = svgs["sweep"].get("data-chosen")
        bars = {g.get("data-micro-batch"): g for g in svgs["sweep"].iter(f"{SVG}g") if g.get("class") == "bar"}
        check(chosen in bars and int(bars[chosen].get("data-total")) == total,
              f"{name}: the sweep's chosen bar is not the --explain total {total}")
        for m, g in bars.items():
            parts = sum(int(r.get("data-bytes")) for r in g.iter(f"{SVG}rect"))
            check(parts == int(g.get("data-total")), f"{name}: m = {m}: parts add up to {parts}, not the total")
        sizes = [int(m) for m in bars]
        check(sizes == sorted(sizes) and int(chosen) in sizes, f"{name}: sweep sizes {sizes}")
        # Readable bars whatever the sizes (m and m + 1 side by side included).
        widths = [float(r.get("width")) for g in bars.values() for r in g.iter(f"{SVG}rect")]
        check(min(widths) >= 8, f"{name}: sweep bars {min(widths):.1f} px wide")

        # The folder: the same pictures, and the tables behind them.
        for file, svg_id in [("arena_map.svg", "arena-map"), ("timeline.svg", "timeline"), ("sweep.svg", "sweep")] + (
                [("throughput.svg", "throughput")] if expect_trials else []) + (
                [("frontier.svg", "frontier")] if frontier else []):
            picture = open(os.path.join(folder, file), encoding="utf-8").read()
            check(ET.fromstring(picture).get("id") == svg_id and picture in text,
                  f"{name}: {file} is not the report's {svg_id} picture")
        with open(os.path.join(folder, "blocks.csv"), newline="") as f:
            check(len(list(csv.DictReader(f))) == len(blocks), f"{name}: blocks.csv and the map differ")
        with open(os.path.join(folder, "sweep.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
            check([int(r["micro_batch"]) for r in rows] == sizes and
                  all(int(r["total"]) == int(bars[r["micro_batch"]].get("data-total")) for r in rows),
                  f"{name}: sweep.csv and the sweep picture differ")
        check(os.path.exists(os.path.join(folder, "frontier.csv")) == frontier,
              f"{name}: frontier.csv {'missing' if frontier else 'written without --frontier'}")
        if frontier:
            check_frontier(root, svgs["frontier"], stdout, folder, name)
        if expect_trials:
            trials = table(root, "trials")
            check(len(trials) >= 1 and all(float(t["samples_per_s"]) > 0 and int(t["rss_growth_bytes"]) > 0
                                           for t in trials), f"{name}: trials without measurements")
            check(table(root, "measured"), f"{name}: no measured figures")
    print(f"checked: {name} ({len(blocks)} blocks, {len(steps)} steps)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    train = parser.parse_args().train
    check_report(train, ["--explain", "--model", "lenet5"])
    # BatchNorm: micro-batches of whole groups, and a batch that is no power of 2 on the sweep's axis.
    check_report(train, ["--explain", "--model", "resnet20", "--batch", "96", "--micro-batch", "64"])
    # A budget that picks the micro-batch size.
    check_report(train, ["--explain", "--model", "cnn", "--batch", "256", "--memory-budget", "24MiB"])
    # Mixed precision: 16-bit blocks, float32 weight gradients, the 16-bit copies of the parameters.
    check_report(train, ["--explain", "--model", "resnet20", "--batch", "64", "--precision", "bf16"])
    check_report(train, ["--explain", "--model", "cnn", "--batch", "256", "--memory-budget", "24MiB",
                         "--precision", "fp16"])
    # A budget the forced micro-batch fits only with values swapped and recomputed (their own roles).
    check_report(train, ["--explain", "--model", "resnet20", "--batch", "64", "--micro-batch", "32",
                         "--memory-budget", "20MiB"])
    # The memory-time frontier: its points as --explain --frontier printed them, with the budget's marked.
    check_report(train, ["--explain", "--model", "resnet20", "--dataset", "synthetic", "--input", "3x16x16",
                         "--classes", "4", "--batch", "16", "--bn-group", "8", "--micro-batch", "16",
                         "--memory-budget", "12MiB",
                         "--strategy", "recompute", "--frontier"])
    # Training with measured trials, on generated data (no dataset needed).
    check_report(train, ["--model", "lenet5", "--dataset", "synthetic", "--limit-train", "512", "--limit-test", "64",
                         "--batch", "64", "--sweep", "16,64"], expect_trials=True)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
