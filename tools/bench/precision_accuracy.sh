#!/usr/bin/env bash
# Does mixed precision train as well as float32? Two epochs of each model on Fashion-MNIST in fp32, bf16 and
# fp16, the same flags otherwise, over a few seeds (a 2-epoch run's test accuracy moves by tenths of a point
# with the seed alone); prints each run's test accuracy, then per model and precision the mean over the
# seeds and its difference from float32's mean in points (issue 27's target: within 0.5). Usage:
#   tools/bench/precision_accuracy.sh [TRAIN_BINARY] [MODELS] [SEEDS]
# (defaults: build/train, "lenet5 cnn resnet20", "0 1 2"). Extra flags for every run: $CRUMB_ACCURACY_FLAGS.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$repo/tools/bench/lib.sh"
crumb=$(crumb_binary "${1:-}")
models=${2:-"lenet5 cnn resnet20"}
seeds=${3:-"0 1 2"}

printf '%-10s %-6s %5s %10s %12s\n' model prec seed test_acc samples/s
for model in $models; do
  for prec in fp32 bf16 fp16; do
    for seed in $seeds; do
      # shellcheck disable=SC2086
      run_json "$tmp/$model-$prec-$seed.json" "$crumb" --model "$model" --epochs 2 --batch 64 --lr 0.05 --momentum 0.9 \
        --precision "$prec" --seed "$seed" ${CRUMB_ACCURACY_FLAGS:-} 2>/dev/null
      python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print("%-10s %-6s %5s %10.4f %12.0f" % (sys.argv[2], sys.argv[3], sys.argv[4], s["test_accuracy"], s["samples_per_s"]))' \
        "$tmp/$model-$prec-$seed.json" "$model" "$prec" "$seed"
    done
  done
done
echo
python3 - "$tmp" "$models" "$seeds" <<'PY'
import json, statistics, sys
tmp, models, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
print("%-10s %-6s %10s %8s %9s" % ("model", "prec", "mean_acc", "stdev", "delta"))
for m in models:
    means = {}
    for p in ("fp32", "bf16", "fp16"):
        accs = [json.load(open(f"{tmp}/{m}-{p}-{s}.json"))["test_accuracy"] for s in seeds]
        means[p] = statistics.mean(accs)
        sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
        print("%-10s %-6s %10.4f %8.4f %+9.2f" % (m, p, means[p], sd, 100 * (means[p] - means["fp32"])))
PY
