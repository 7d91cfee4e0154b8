#!/usr/bin/env bash
# Kill-and-resume soak test: a training run interrupted again and again at random points, by SIGINT, SIGTERM
# and SIGKILL, directly and under `timeout` (its own deadline, and a terminal's Ctrl-C to the whole process
# group, which timeout forwards again), and by its data file truncated under it (what numpy.save over a
# file in use does: the run must end with one error line naming the file, after saving its last step, and
# resume once the file is restored), each time resumed (after SIGKILL, from the last periodic save), must
# end with the bytes of the same run left alone. It trains on a --dataset npy folder it writes, read in
# place. Prints one line per interruption and the totals: interruptions survived, and optimizer steps lost
# per SIGKILL (trained after the last periodic save). When a run finishes before the time is up, another
# round of it starts.
#   tools/soak.sh [--train BIN] [--seconds S] [--seed N]
# Defaults: build/train, 120 s of interruptions at most, seed 1. Exits non-zero if any run fails in a way
# an interruption does not explain, or the final weights differ.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
train="$repo/build/train"
seconds=120
seed=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --train) train=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    *) echo "soak: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ -x "$train" ]] || { echo "soak: $train is not an executable train binary (build it first)" >&2; exit 2; }
RANDOM=$seed
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 4096 training and 64 test images of 1x16x16 whose class (of 4) sets their brightness, as .npy files.
data="$tmp/data"
mkdir -p "$data"
python3 - "$data" <<'EOF'
import random, struct, sys
def save(path, descr, shape, data):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    header += " " * (-(10 + len(header) + 1) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data)
rng = random.Random(7)
for split, n in (("", 4096), ("_test", 64)):
    labels = [rng.randrange(4) for _ in range(n)]
    pixels = bytes(min(255, 50 * c + rng.randrange(100)) for c in labels for _ in range(256))
    save(f"{sys.argv[1]}/x{split}.npy", "|u1", f"({n}, 1, 16, 16)", pixels)
    save(f"{sys.argv[1]}/y{split}.npy", "|u1", f"({n},)", bytes(labels))
EOF
cp "$data/x.npy" "$tmp/x.npy.kept"

# Long enough to be interrupted many times, with periodic saves, a cosine schedule, momentum and shuffled,
# augmented batches: everything a resume must restore.
args=(--model cnn --dataset npy --data "$data" --batch 32 --epochs 10 --lr-schedule cosine --augment crop-flip
      --threads 1 --save-every 7)

# The tensor bytes of a safetensors file (without its header, whose metadata records the command line).
tensors() {
  python3 - "$1" <<'EOF'
import hashlib, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
print(hashlib.sha256(data[8 + n:]).hexdigest())
EOF
}
# The optimizer steps a checkpoint records (0 when there is none yet).
saved_steps() {
  [[ -f "$1" ]] || { echo 0; return; }
  python3 - "$1" <<'EOF'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
print(json.loads(data[8:8 + n])["__metadata__"].get("optimizer_steps", "0"))
EOF
}
# The last optimizer step a --log file recorded (0 when none).
logged_steps() {
  python3 - "$1" <<'EOF'
import json, sys
steps = 0
try:
    for line in open(sys.argv[1]):
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a line cut short by SIGKILL
        if e.get("event") == "step":
            steps = e["step"]
except FileNotFoundError:
    pass
print(steps)
EOF
}

# Whether a run ended by the truncation of its data file (exit status $3, stderr in $1) said so as it must:
# status 1 and one error line, the last, naming the file ($2); one raised mid-run also names the save.
truncation_error() {
  (( $3 == 1 )) && [[ $(grep -c '^train: error: ' "$1") == 1 ]] || return 1
  local last
  last=$(tail -n 1 "$1")
  [[ $last == "train: error: "*"$2"* ]] || return 1
  # Saved at the failure, or already held by a periodic save of that very step.
  [[ $last != *"was truncated while training"* || $last == *"optimizer step"*" in $ck: --resume $ck continues the run" ||
     $last == *"; $ck holds the last optimizer step ("*"): --resume $ck continues the run" ]]
}

echo "soak: reference run (no interruptions)"
"$train" "${args[@]}" --save "$tmp/ref.st" > /dev/null 2> "$tmp/ref.err" || { cat "$tmp/ref.err" >&2; exit 1; }
total_steps=$(saved_steps "$tmp/ref.st")

ck="$tmp/run.st"
start=$(date +%s)
interruptions=0 kills=0 truncations=0 lost=0 attempt=0 rounds=0
# Rounds of the whole run, each interrupted until it finishes and then compared, until the time is up.
while :; do
rounds=$((rounds + 1))
rm -f "$ck" "$ck.optimizer"
while (( $(saved_steps "$ck") < total_steps )); do
  attempt=$((attempt + 1))
  log="$tmp/attempt$attempt.jsonl"
  if [[ -f "$ck" ]]; then cmd=("$train" --resume "$ck" --log "$log"); else cmd=("$train" "${args[@]}" --save "$ck" --log "$log"); fi
  before=$(saved_steps "$ck")
  over=$(( $(date +%s) - start >= seconds ))
  if (( over )); then
    # Time is up: the last attempt runs to the end.
    "${cmd[@]}" > /dev/null 2> "$tmp/err" || { echo "soak: the final run failed:" >&2; cat "$tmp/err" >&2; exit 1; }
    break
  fi
  how=$((RANDOM % 7))
  delay=$(printf '0.%02d' $((RANDOM % 100)))
  delay=$(python3 -c "print(round(0.3 + 2.5 * $delay, 2))")
  set -m
  case $how in
    0|1|2|6) "${cmd[@]}" > /dev/null 2> "$tmp/err" & ;;  # directly
    3) timeout -s TERM "$delay" "${cmd[@]}" > /dev/null 2> "$tmp/err" & ;;
    *) timeout 600 "${cmd[@]}" > /dev/null 2> "$tmp/err" & ;;  # the job's process group leader is timeout
  esac
  pid=$!
  set +m
  case $how in
    0) signal=INT; sleep "$delay"; kill -INT "$pid" 2> /dev/null || true ;;
    1) signal=TERM; sleep "$delay"; kill -TERM "$pid" 2> /dev/null || true ;;
    2) signal=KILL; sleep "$delay"; kill -KILL "$pid" 2> /dev/null || true ;;
    3) signal="TERM (timeout's deadline)" ;;
    4) signal="INT (Ctrl-C to timeout's process group)"; sleep "$delay"; kill -INT -"$pid" 2> /dev/null || true ;;
    5) signal=KILL; sleep "$delay"; pkill -KILL -P "$pid" 2> /dev/null || true ;;
    6) signal="truncation of x.npy"; sleep "$delay"; truncate -s 65536 "$data/x.npy" ;;
  esac
  code=0
  { wait "$pid"; } 2> /dev/null || code=$?  # (without bash's "Killed" job report)
  (( how == 6 )) && cp "$tmp/x.npy.kept" "$data/x.npy"  # restored in place, for the next attempt
  after=$(saved_steps "$ck")
  done_steps=$(logged_steps "$log")
  if (( code == 0 )); then
    echo "soak: attempt $attempt finished before its $signal"
    break
  fi
  # Ended by the signal (128 + n, or timeout's 124), or by SIGKILL; after a truncation, by one error line
  # naming the file (mid-run only once the last step is saved; or while the data loads). Anything else is a
  # failure.
  if (( how == 6 )); then
    if ! truncation_error "$tmp/err" "$data/x.npy" "$code"; then
      echo "soak: attempt $attempt ($signal after ${delay}s) exited $code:" >&2; cat "$tmp/err" >&2; exit 1
    fi
  else
    case $code in
      124|130|137|143) ;;
      *) echo "soak: attempt $attempt ($signal after ${delay}s) exited $code:" >&2; cat "$tmp/err" >&2; exit 1 ;;
    esac
  fi
  interruptions=$((interruptions + 1))
  (( how == 6 )) && truncations=$((truncations + 1))
  if [[ $signal == KILL ]]; then
    kills=$((kills + 1))
    (( done_steps > after )) && lost=$((lost + done_steps - after))
    echo "soak: attempt $attempt: SIGKILL after ${delay}s at step $done_steps; resumes from step $after (saved $before before)"
  else
    (( done_steps > after )) && { echo "soak: attempt $attempt: $signal lost steps $after..$done_steps" >&2; exit 1; }
    echo "soak: attempt $attempt: $signal after ${delay}s, saved at step $after"
  fi
done

[[ $(tensors "$ck") == $(tensors "$tmp/ref.st") && $(tensors "$ck.optimizer") == $(tensors "$tmp/ref.st.optimizer") ]] || {
  echo "soak: FAILED: round $rounds: the interrupted run's weights differ from the reference's" >&2
  exit 1
}
echo "soak: round $rounds: byte-identical to the uninterrupted run"
(( $(date +%s) - start < seconds )) || break
done

per_kill=$(python3 -c "print(f'{$lost / $kills:.1f}' if $kills else 'n/a')")
echo "soak: ok: $interruptions interruptions survived in $rounds rounds of $total_steps steps ($kills SIGKILL," \
     "$per_kill steps lost per SIGKILL with --save-every 7; $truncations truncations of x.npy); every round's" \
     "final weights and optimizer state byte-identical to the uninterrupted run"
