#!/usr/bin/env bash
# Throughput of micro-batching: trains the same batch B once as one micro-batch (m = B) and once
# split into micro-batches of m = B / split, one run after the other, and prints samples/s of each,
# their ratio and both test accuracies (which should agree: the gradients are the same).
#
# usage: tools/bench/microbatch.sh [--model lenet5] [--batch 512] [--split 8] [--epochs 1]
#          [--threads 2] [--lr 0.05] [--crumb PATH] [--repeat 3]
#
# The two runs alternate --repeat times and the best samples/s of each is compared, as in compare.sh.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
model=lenet5 batch=512 split=8 epochs=1 threads=2 lr=0.05 crumb="" repeat=3
usage() { sed -n '6,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  [[ "$1" == -h || "$1" == --help ]] && usage
  [[ $# -ge 2 ]] || { echo "missing value for $1" >&2; usage; }
  case "$1" in
    --model) model=$2 ;; --batch) batch=$2 ;; --split) split=$2 ;; --epochs) epochs=$2 ;;
    --threads) threads=$2 ;; --lr) lr=$2 ;; --crumb) crumb=$2 ;; --repeat) repeat=$2 ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
  shift 2
done
(( split >= 1 && batch % split == 0 )) || { echo "--batch must be a multiple of --split" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$repo/tools/bench/lib.sh"
crumb=$(crumb_binary "$crumb")

common=(--model "$model" --epochs "$epochs" --batch "$batch" --lr "$lr" --momentum 0.9 --threads "$threads" --seed 0)
for ((r = 0; r < repeat; ++r)); do
  run_json "$tmp/full.$r.json" "$crumb" "${common[@]}" --micro-batch "$batch"
  run_json "$tmp/split.$r.json" "$crumb" "${common[@]}" --micro-batch $((batch / split))
done

python3 - "$tmp" "$repeat" <<'PY'
import json, sys
tmp, repeat = sys.argv[1], int(sys.argv[2])
def best(name):
    return max((json.load(open(f"{tmp}/{name}.{r}.json")) for r in range(repeat)), key=lambda j: j["samples_per_s"])
full, split = best("full"), best("split")
print(f"best of {repeat} interleaved runs each")
print(f'{"run":<14} {"micro-batch":>11} {"samples/s":>10} {"test acc":>9} {"arena MiB":>10}')
for name, r in (("m = B", full), ("m = B/split", split)):
    print(f'{name:<14} {r["micro_batch"]:>11} {r["samples_per_s"]:>10.1f} {r["test_accuracy"]:>9.4f} '
          f'{r["arena_bytes"] / 2**20:>10.2f}')
ratio = split["samples_per_s"] / full["samples_per_s"]
print(json.dumps({"model": full["model"], "batch": full["batch"], "micro_batch": split["micro_batch"],
                  "throughput_ratio": round(ratio, 3),
                  "arena_ratio": round(split["arena_bytes"] / full["arena_bytes"], 3),
                  "acc_full": full["test_accuracy"], "acc_split": split["test_accuracy"]}))
PY
