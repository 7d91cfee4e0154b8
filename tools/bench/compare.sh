#!/usr/bin/env bash
# Run Crumb's train and the PyTorch reference with identical settings and
# print a side-by-side table of throughput and accuracy, then one JSON line.
#
# usage: tools/bench/compare.sh [--model lenet5|cnn|mlp|resnet20|resnet18|resnet50|vgg11_bn|all]
#          [--epochs 1] [--batch 64] [--threads 2] [--device cpu] [--dataset fashion-mnist|cifar10]
#          [--data DIR] [--crumb PATH] [--repeat 3] [--limit-train N] [--torch-tf32 off|default|on]
#          [--precision fp32|bf16|fp16] [-- extra train flags]   (vgg11_bn: --dataset cifar10 --data DIR)
#
# Each side runs --repeat times, alternating Crumb and PyTorch, and the best samples/s of each side
# is reported: on a shared machine throughput drifts by tens of percent within minutes, and the
# best of a few interleaved runs is what each side can do when the machine lets it.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
model=lenet5 epochs=1 batch=64 threads=2 device=cpu dataset=fashion-mnist data="" crumb="" repeat=3 torch_tf32=off limit_train=0 precision=fp32
crumb_extra=()
# Fixed so both sides train the same problem; not meant to be tuned here.
lr=0.05 momentum=0.9 seed=0

usage() { sed -n '5,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  [[ "$1" == -h || "$1" == --help ]] && usage
  if [[ "$1" == -- ]]; then shift; crumb_extra=("$@"); break; fi
  [[ $# -ge 2 ]] || { echo "missing value for $1" >&2; usage; }
  case "$1" in
    --model) model=$2 ;;
    --epochs) epochs=$2 ;;
    --batch) batch=$2 ;;
    --threads) threads=$2 ;;
    --device) device=$2 ;;
    --dataset) dataset=$2 ;;
    --data) data=$2 ;;
    --crumb) crumb=$2 ;;
    --repeat) repeat=$2 ;;
    --torch-tf32) torch_tf32=$2 ;;
    --limit-train) limit_train=$2 ;;
    --precision) precision=$2 ;;  # both sides: Crumb's --precision, PyTorch's autocast (GradScaler for fp16)
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
  shift 2
done

case "$model" in
  all) models=(lenet5 cnn mlp) ;;
  lenet5|cnn|mlp|resnet20|resnet18|resnet50|vgg11_bn) models=("$model") ;;
  *) echo "unknown model: $model" >&2; usage ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$repo/tools/bench/lib.sh"
crumb=$(crumb_binary "$crumb")

py=$("$repo/tools/bench/setup_venv.sh" | tail -n 1)

common=(--epochs "$epochs" --batch "$batch" --lr "$lr" --momentum "$momentum"
        --threads "$threads" --seed "$seed" --dataset "$dataset" --precision "$precision")
[[ -n "$data" ]] && common+=(--data "$data")
[[ "$limit_train" != 0 ]] && common+=(--limit-train "$limit_train")

# One after another, never concurrently, so neither steals the other's cores.
for m in "${models[@]}"; do
  for ((r = 0; r < repeat; ++r)); do
    run_json "$tmp/$m.crumb.$r.json" "$crumb" --model "$m" --device "$device" "${common[@]}" "${crumb_extra[@]}"
    run_json "$tmp/$m.torch.$r.json" "$py" "$repo/tools/bench/torch_reference.py" \
      --model "$m" --device "$device" --tf32 "$torch_tf32" "${common[@]}"
  done
done

python3 - "$tmp" "$repeat" "${models[@]}" <<'PY'
import json, sys
tmp, repeat, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def best(model, side):
    runs = [json.load(open(f"{tmp}/{model}.{side}.{r}.json")) for r in range(repeat)]
    top = max(runs, key=lambda j: j["samples_per_s"])
    top["all_samples_per_s"] = [j["samples_per_s"] for j in runs]
    return top

rows = []
for m in models:
    c = best(m, "crumb")
    t = best(m, "torch")
    rows.append({
        "model": m,
        "epochs": t["epochs"], "batch": t["batch"], "threads": t["threads"],
        "crumb_samples_per_s": c["samples_per_s"],
        "torch_samples_per_s": t["samples_per_s"],
        "ratio": round(c["samples_per_s"] / t["samples_per_s"], 3),
        "crumb_test_accuracy": c["test_accuracy"],
        "torch_test_accuracy": t["test_accuracy"],
        "acc_diff": round(c["test_accuracy"] - t["test_accuracy"], 4),
        "crumb_final_loss": c.get("final_loss"),
        "torch_final_loss": t.get("final_loss"),
        "crumb_runs": c["all_samples_per_s"],
        "torch_runs": t["all_samples_per_s"],
        "torch_version": t["torch_version"],
        "torch_device": t["device"],
        "torch_tf32": t.get("tf32"),
        "precision": t.get("precision"),
        "crumb_device": c["device"],
    })
hdr = ("model", "crumb sam/s", "torch sam/s", "crumb/torch",
       "crumb acc", "torch acc", "acc diff", "torch")
fmt = "{:<8} {:>12} {:>12} {:>11} {:>9} {:>9} {:>9}  {}"
print(f"best of {repeat} interleaved runs per side")
print(fmt.format(*hdr))
for r in rows:
    print(fmt.format(r["model"],
                     f'{r["crumb_samples_per_s"]:.1f}', f'{r["torch_samples_per_s"]:.1f}',
                     f'{r["ratio"]:.3f}',
                     f'{r["crumb_test_accuracy"]:.4f}', f'{r["torch_test_accuracy"]:.4f}',
                     f'{r["acc_diff"]:+.4f}',
                     f'{r["torch_version"]} ({r["torch_device"]}, tf32 {r["torch_tf32"]})'))
print(json.dumps({"compare": rows}, separators=(",", ":")))
PY
