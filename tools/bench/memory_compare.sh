#!/usr/bin/env bash
# Training memory per micro-batch, Crumb vs PyTorch (CPU): Crumb's planned activations and arena
# block (activations + workspace) from `train --explain`, against PyTorch's peak activation memory
# and saved-for-backward bytes from torch_memory.py. Neither side counts the input batch,
# parameters, parameter gradients or optimizer state. Prints a table and one JSON line.
#
# usage: tools/bench/memory_compare.sh [--batch 64] [--models "lenet5 cnn mlp"] [--threads 2]
#          [--crumb PATH] [--input CxHxW --classes K (synthetic data of that shape, e.g. 3x224x224)]
#          [-- extra train flags, e.g. --strategy recompute --memory-budget 1GiB]
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
batch=64 models="lenet5 cnn mlp" threads=2 crumb="" input="" classes=10
crumb_extra=()
usage() { sed -n '7,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  [[ "$1" == -h || "$1" == --help ]] && usage
  if [[ "$1" == -- ]]; then shift; crumb_extra=("$@"); break; fi
  [[ $# -ge 2 ]] || { echo "missing value for $1" >&2; usage; }
  case "$1" in
    --batch) batch=$2 ;; --models) models=$2 ;; --threads) threads=$2 ;; --crumb) crumb=$2 ;;
    --input) input=$2 ;; --classes) classes=$2 ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
  shift 2
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$repo/tools/bench/lib.sh"
crumb=$(crumb_binary "$crumb")
py=$("$repo/tools/bench/setup_venv.sh" | tail -n 1)

shape=()
[[ -n "$input" ]] && shape=(--dataset synthetic --input "$input" --classes "$classes")
for m in $models; do
  echo "== $crumb --model $m --batch $batch ${shape[*]} ${crumb_extra[*]} --explain" >&2
  "$crumb" --model "$m" --batch "$batch" "${shape[@]}" "${crumb_extra[@]}" --explain > "$tmp/$m.explain" \
    || { echo "crumb --explain failed for $m" >&2; exit 1; }
  run_json "$tmp/$m.torch.json" "$py" "$repo/tools/bench/torch_memory.py" \
    --model "$m" --batch "$batch" --threads "$threads" --input "${input:-1x28x28}" --classes "$classes"
done

python3 - "$tmp" "$batch" $models <<'PY'
import json, re, sys
tmp, batch, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
UNIT = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}

def explain_bytes(text, label):
    # --explain prints sizes rounded to 2 decimals, so these are good to about 0.005 units.
    m = re.search(rf"^\s*{re.escape(label)}\s+([\d.]+) (B|KiB|MiB|GiB)(?:  [A-Z0-9]+)?\s*$", text, re.M)
    if not m:
        sys.exit(f"no '{label}' line in train --explain output")
    return round(float(m.group(1)) * UNIT[m.group(2)])

def mib(b):
    return f"{b / 2**20:.2f}"

rows = {}
for m in models:
    text = open(f"{tmp}/{m}.explain").read()
    if not re.search(rf"in 1 micro-batch\(es\) of {batch}\b", text):
        sys.exit(f"{m}: train did not plan one micro-batch of {batch}; the figures would not compare")
    t = json.load(open(f"{tmp}/{m}.torch.json"))
    r = {"crumb_activation_bytes": explain_bytes(text, "peak live activations (train)"),
         "crumb_arena_bytes": explain_bytes(text, "arena (block)"),
         "torch_peak_bytes": t["peak_activation_bytes"],
         "torch_saved_bytes": t["saved_tensor_bytes"]}
    r["ratio"] = round(r["crumb_arena_bytes"] / r["torch_peak_bytes"], 3)
    rows[m] = r
    torch_version = t["torch_version"]

print(f"batch {batch}, torch {torch_version} (CPU); MiB")
print(f'{"model":<8} {"crumb act":>10} {"crumb arena":>12} {"torch peak":>11} {"torch saved":>12} '
      f'{"arena/peak":>11}')
for m, r in rows.items():
    print(f'{m:<8} {mib(r["crumb_activation_bytes"]):>10} {mib(r["crumb_arena_bytes"]):>12} '
          f'{mib(r["torch_peak_bytes"]):>11} {mib(r["torch_saved_bytes"]):>12} {r["ratio"]:>11.3f}')
print(json.dumps({"batch": batch, "torch_version": torch_version, "models": rows},
                 separators=(",", ":")))
PY
