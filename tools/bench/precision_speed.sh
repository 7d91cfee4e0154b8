#!/usr/bin/env bash
# Does 16-bit pay on this CPU? One epoch of each model in float32, bf16 on the vdpbf16ps tiles
# (CRUMB_CPU_AMX=off) and bf16 as it runs by default (AMX where the CPU has it), in interleaved rounds;
# prints each setting's best samples/s and least CPU seconds (user + sys: on a shared machine the CPU time
# moves by a few percent where the wall clock moves by tens), their ratios to float32, then one JSON line.
#   tools/bench/precision_speed.sh [--models "resnet20 cnn lenet5"] [--threads 1] [--rounds 3] [--crumb PATH]
# Each model's --limit-train keeps an epoch to a few seconds (resnet20 1024, cnn 4096, others 16384).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
models="resnet20 cnn lenet5" threads=1 rounds=3 crumb=""
while [[ $# -gt 0 ]]; do
  [[ $# -ge 2 ]] || { sed -n '6p' "$0" >&2; exit 2; }
  case "$1" in
    --models) models=$2 ;;
    --threads) threads=$2 ;;
    --rounds) rounds=$2 ;;
    --crumb) crumb=$2 ;;
    *) echo "unknown argument: $1" >&2; sed -n '6p' "$0" >&2; exit 2 ;;
  esac
  shift 2
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$repo/tools/bench/lib.sh"
crumb=$(crumb_binary "$crumb")

settings=("fp32 on" "bf16 off" "bf16 on")
for ((r = 0; r < rounds; ++r)); do
  for m in $models; do
    case "$m" in resnet*) limit=1024 ;; cnn) limit=4096 ;; *) limit=16384 ;; esac
    for s in "${settings[@]}"; do
      read -r prec amx <<< "$s"
      /usr/bin/time -f '%U %S' -o "$tmp/$m.$prec.$amx.$r.time" env CRUMB_CPU_AMX="$amx" \
        "$crumb" --model "$m" --epochs 1 --limit-train "$limit" --limit-test 128 --threads "$threads" \
        --precision "$prec" --seed 0 > "$tmp/stdout" 2> /dev/null
      tail -n 1 "$tmp/stdout" > "$tmp/$m.$prec.$amx.$r.json"
    done
  done
done

python3 - "$tmp" "$rounds" "$threads" $models <<'PY'
import json, sys
tmp, rounds, threads, models = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
settings = [("fp32", "on", "fp32"), ("bf16", "off", "bf16 vdpbf16ps"), ("bf16", "on", "bf16 default")]
rows = []
print(f"best of {rounds} interleaved rounds, {threads} thread(s): samples/s (CPU s)")
print(f"{'model':<9}" + "".join(f"{name:>24}" for _, _, name in settings) + f"{'default/fp32':>14}")
for m in models:
    row = {"model": m}
    cells = []
    for prec, amx, name in settings:
        runs = [json.load(open(f"{tmp}/{m}.{prec}.{amx}.{r}.json")) for r in range(rounds)]
        cpu = [sum(map(float, open(f"{tmp}/{m}.{prec}.{amx}.{r}.time").read().split())) for r in range(rounds)]
        sps = max(j["samples_per_s"] for j in runs)
        row[name] = {"samples_per_s": sps, "cpu_s": round(min(cpu), 2), "final_loss": runs[0].get("final_loss")}
        cells.append(f"{sps:>14.0f} ({min(cpu):5.2f})")
    row["default_over_fp32"] = round(row["bf16 default"]["samples_per_s"] / row["fp32"]["samples_per_s"], 3)
    rows.append(row)
    print(f"{m:<9}" + "".join(f"{c:>24}" for c in cells) + f"{row['default_over_fp32']:>14.3f}")
print(json.dumps({"precision_speed": rows, "threads": threads}, separators=(",", ":")))
PY
