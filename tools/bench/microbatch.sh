#!/usr/bin/env bash
# Throughput of micro-batching. Trains the "full" run, a batch that is one micro-batch, and the "split"
# run, a batch of B split into micro-batches, alternately, and prints samples/s of each, their ratio and
# both test accuracies. The split run's micro-batch is B / --split, or whatever --budget lets the
# scheduler pick; the full run's batch is B (same gradients, so the accuracies agree) or --full-batch
# (e.g. B/8: "8x the batch that fits, at what speed?").
#
# usage: tools/bench/microbatch.sh [--model lenet5] [--batch 512] [--split 8] [--budget SIZE]
#          [--full-batch N] [--epochs 1] [--threads 2] [--lr 0.05] [--device cpu] [--data DIR]
#          [--crumb PATH] [--repeat 3]
#
# The two runs alternate --repeat times and the best samples/s of each is compared, as in compare.sh.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
model=lenet5 batch=512 split=8 budget="" full_batch="" epochs=1 threads=2 lr=0.05 device=cpu data="" crumb="" repeat=3
usage() { sed -n '8,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  [[ "$1" == -h || "$1" == --help ]] && usage
  [[ $# -ge 2 ]] || { echo "missing value for $1" >&2; usage; }
  case "$1" in
    --model) model=$2 ;; --batch) batch=$2 ;; --split) split=$2 ;; --budget) budget=$2 ;;
    --full-batch) full_batch=$2 ;; --epochs) epochs=$2 ;; --threads) threads=$2 ;; --lr) lr=$2 ;;
    --device) device=$2 ;; --data) data=$2 ;; --crumb) crumb=$2 ;; --repeat) repeat=$2 ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
  shift 2
done
if [[ -z "$budget" ]]; then
  (( split >= 1 && batch % split == 0 )) || { echo "--batch must be a multiple of --split" >&2; exit 2; }
  split_flags=(--micro-batch $((batch / split)))
else
  split_flags=(--memory-budget "$budget")
fi
full_batch=${full_batch:-$batch}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$repo/tools/bench/lib.sh"
crumb=$(crumb_binary "$crumb")

common=(--model "$model" --epochs "$epochs" --lr "$lr" --momentum 0.9 --threads "$threads" --seed 0 --device "$device")
[[ -n "$data" ]] && common+=(--data "$data")
for ((r = 0; r < repeat; ++r)); do
  run_json "$tmp/full.$r.json" "$crumb" "${common[@]}" --batch "$full_batch" --micro-batch "$full_batch"
  run_json "$tmp/split.$r.json" "$crumb" "${common[@]}" --batch "$batch" "${split_flags[@]}"
done

python3 - "$tmp" "$repeat" <<'PY'
import json, sys
tmp, repeat = sys.argv[1], int(sys.argv[2])
def best(name):
    return max((json.load(open(f"{tmp}/{name}.{r}.json")) for r in range(repeat)), key=lambda j: j["samples_per_s"])
full, split = best("full"), best("split")
print(f"best of {repeat} interleaved runs each, {full['model']} on {full['device']}")
print(f'{"run":<6} {"batch":>7} {"micro-batch":>11} {"samples/s":>10} {"test acc":>9} {"arena MiB":>10}')
for name, r in (("full", full), ("split", split)):
    print(f'{name:<6} {r["batch"]:>7} {r["micro_batch"]:>11} {r["samples_per_s"]:>10.1f} {r["test_accuracy"]:>9.4f} '
          f'{r["arena_bytes"] / 2**20:>10.2f}')
ratio = split["samples_per_s"] / full["samples_per_s"]
print(json.dumps({"model": full["model"], "device": full["device"], "full_batch": full["batch"],
                  "batch": split["batch"], "micro_batch": split["micro_batch"],
                  "throughput_ratio": round(ratio, 3),
                  "arena_ratio": round(split["arena_bytes"] / full["arena_bytes"], 3),
                  "acc_full": full["test_accuracy"], "acc_split": split["test_accuracy"]}))
PY
