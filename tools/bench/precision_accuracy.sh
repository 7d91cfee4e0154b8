#!/usr/bin/env bash
# Does mixed precision train as well as float32? Two epochs of each model on Fashion-MNIST in fp32, bf16 and
# fp16 (same seed, same flags otherwise); prints test accuracy per precision and the difference from
# float32 in points (issue 27's target: within 0.5). Usage:
#   tools/bench/precision_accuracy.sh [TRAIN_BINARY] [MODELS]    (defaults: build/train, "lenet5 cnn resnet20")
# Extra flags for every run: $CRUMB_ACCURACY_FLAGS (e.g. "--limit-train 12000").
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$repo/tools/bench/lib.sh"
crumb=$(crumb_binary "${1:-}")
models=${2:-"lenet5 cnn resnet20"}

printf '%-10s %-6s %10s %9s %12s\n' model prec test_acc delta samples/s
for model in $models; do
  fp32=
  for prec in fp32 bf16 fp16; do
    # shellcheck disable=SC2086
    run_json "$tmp/$model-$prec.json" "$crumb" --model "$model" --epochs 2 --batch 64 --lr 0.05 --momentum 0.9 \
      --precision "$prec" ${CRUMB_ACCURACY_FLAGS:-} 2>/dev/null
    read -r acc sps < <(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["test_accuracy"], s["samples_per_s"])' "$tmp/$model-$prec.json")
    [[ -z "$fp32" ]] && fp32=$acc
    printf '%-10s %-6s %10.4f %+9.2f %12.0f\n' "$model" "$prec" "$acc" "$(python3 -c "print(100*($acc-$fp32))")" "$sps"
  done
done
