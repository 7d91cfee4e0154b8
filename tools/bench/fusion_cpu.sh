#!/usr/bin/env bash
# Fusion on against off on the CPU (issue 38): the same training run with --fuse on and --fuse off, in
# interleaved rounds, one after another; the CPU seconds (user + sys) of each run, its step time, and the
# load average beside it. With --perf, each run is sampled by `perf record` (cpu-clock, 1 kHz) and the
# table gives the milliseconds spent in the passes fusion removes (ReLU's forward and backward, and the
# adds of the chains it fuses: the unfused run's add_forward less the fused run's, which keeps the
# gradient sums) and in the normalisation kernels, each as a share of the run.
#
# usage: tools/bench/fusion_cpu.sh [--model resnet20] [--batch 128] [--limit-train 3840] [--rounds 5]
#          [--threads 1] [--crumb PATH] [--perf] [-- extra train flags]
#
# On a shared machine CPU time at one thread is the figure to compare (preemption does not inflate it);
# each side's best and median over the rounds are printed, then fused / unfused.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
model=resnet20 batch=128 limit_train=3840 rounds=5 threads=1 crumb="" use_perf=0
extra=()
usage() { sed -n '9,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage ;;
    --) shift; extra=("$@"); break ;;
    --perf) use_perf=1; shift ;;
    --model|--batch|--limit-train|--rounds|--threads|--crumb)
      [[ $# -ge 2 ]] || { echo "missing value for $1" >&2; usage; }
      name=${1#--}
      printf -v "${name//-/_}" '%s' "$2"
      shift 2 ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$repo/tools/bench/lib.sh"
crumb=$(crumb_binary "$crumb")
if [[ $use_perf == 1 ]] && ! command -v perf >/dev/null; then
  echo "--perf: no perf on PATH" >&2; exit 2
fi

args=(--model "$model" --batch "$batch" --limit-train "$limit_train" --limit-test 128 --epochs 1
      --threads "$threads" "${extra[@]}")
for ((r = 0; r < rounds; ++r)); do
  # Alternate which side goes first, so neither always runs on the machine the other left.
  order=(on off); ((r % 2)) && order=(off on)
  for fuse in "${order[@]}"; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    out="$tmp/$fuse.$r"
    cmd=("$crumb" "${args[@]}" --fuse "$fuse")
    [[ $use_perf == 1 ]] && cmd=(perf record -q -e cpu-clock -F 1000 -o "$out.perf" -- "${cmd[@]}")
    /usr/bin/time -f "%U %S" -o "$out.time" "${cmd[@]}" > "$out.stdout" 2>/dev/null
    tail -n 1 "$out.stdout" > "$out.json"
    echo "$load" > "$out.load"
    if [[ $use_perf == 1 ]]; then
      perf report -i "$out.perf" -n --no-children --no-demangle --sort symbol 2>/dev/null | grep '%' > "$out.syms"
      rm -f "$out.perf"
    fi
  done
done

python3 - "$tmp" "$rounds" "$model" "$use_perf" <<'PY'
import json, re, statistics, sys
tmp, rounds, model, use_perf = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"

def samples(path):
    """ms per symbol class of a perf report (-n, mangled names): 1 kHz sampling, so a sample is 1 ms."""
    out = {"total": 0, "relu_forward": 0, "relu_backward": 0, "add_forward": 0, "norm": 0}
    for line in open(path):
        m = re.match(r"\s*[\d.]+%\s+(\d+)\s+\[.\]\s+(\S+)", line)
        if not m:
            continue
        n, sym = int(m.group(1)), m.group(2)
        out["total"] += n
        for key in ("relu_forward", "relu_backward", "add_forward"):
            if f"{len(key)}{key}" in sym:
                out[key] += n
        if re.search(r"(batch|group)_norm|Lanes|moments|affine_run|dx_run|dx_of_run|block_|apply_block", sym):
            out["norm"] += n
    return out

runs = {"on": [], "off": []}
for r in range(rounds):
    for fuse in ("on", "off"):
        base = f"{tmp}/{fuse}.{r}"
        user, sys_ = map(float, open(base + ".time").read().split())
        j = json.load(open(base + ".json"))
        run = {"round": r, "cpu": user + sys_, "step": j["measured_step_s"], "loss": j["final_loss"],
               "load": float(open(base + ".load").read())}
        if use_perf:
            run["perf"] = samples(base + ".syms")
        runs[fuse].append(run)

print(f"{model}: {rounds} interleaved rounds")
print("| round | fuse | load (1 min) | CPU s (user+sys) | step s | final loss |" + (" norm kernels ms | relu fwd + bwd ms | add ms |" if use_perf else ""))
print("|---:|---|---:|---:|---:|---:|" + ("---:|---:|---:|" if use_perf else ""))
for r in range(rounds):
    for fuse in ("on", "off"):
        x = runs[fuse][r]
        row = f"| {r} | {fuse} | {x['load']:.2f} | {x['cpu']:.2f} | {x['step']:.4f} | {x['loss']:.6f} |"
        if use_perf:
            p = x["perf"]
            row += f" {p['norm']} | {p['relu_forward'] + p['relu_backward']} | {p['add_forward']} |"
        print(row)
for fuse in ("on", "off"):
    cpu = [x["cpu"] for x in runs[fuse]]
    print(f"{fuse:>3}: CPU s best {min(cpu):.2f}, median {statistics.median(cpu):.2f}")
on, off = [x["cpu"] for x in runs["on"]], [x["cpu"] for x in runs["off"]]
print(f"fused / unfused: best {min(on) / min(off):.3f}, median {statistics.median(on) / statistics.median(off):.3f}")
if use_perf:
    med = lambda fuse, f: statistics.median(f(x["perf"]) for x in runs[fuse])
    total = med("off", lambda p: p["total"])
    removed = med("off", lambda p: p["relu_forward"] + p["relu_backward"]) + \
        med("off", lambda p: p["add_forward"]) - med("on", lambda p: p["add_forward"])
    print(f"passes fusion removes (medians, unfused run): {removed:.0f} of {total:.0f} ms, {100 * removed / total:.1f}%")
    print(f"normalisation kernels + those passes: unfused {med('off', lambda p: p['norm'] + p['relu_forward'] + p['relu_backward'] + p['add_forward']):.0f} ms, "
          f"fused {med('on', lambda p: p['norm'] + p['add_forward']):.0f} ms")
    print(f"whole run (samples): unfused {total:.0f} ms, fused {med('on', lambda p: p['total']):.0f} ms")
PY
