#!/usr/bin/env bash
# Everything the GPU machine is for, in one call that fits its limits (one command of at most 10 minutes,
# at most 8 files back): find cuDNN, build with CUDA, run the GPU tests (one process each), the rest of
# the suite, train on the GPU and the CPU side by side, compare with the machine's PyTorch, then run
# compute-sanitizer. Every phase is bounded against one deadline, so whatever ran comes back; phases that
# no longer fit are skipped and say so. Files go to $OUT (or ./gpu-out); summary.txt is printed last.
#
# usage: tools/bench/gpu.sh [--deadline 560] [--phases build,cuda,cpu,train,graphs,compare,budget,swap,sanitize]
#          [--models lenet5,cnn] [--batch 256] [--epochs 2] [--repeat 3] [-- extra train flags]
# Needs gpu-carry/ (tools/bench/gpu_carry.sh) where the machine lacks Eigen, GoogleTest, zlib or the data.
set -uo pipefail  # no -e: a failing phase is recorded and the next one still runs

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deadline=560 phases=build,cuda,cpu,train,graphs,compare,budget,swap,sanitize models=lenet5,cnn batch=256 epochs=2 repeat=3
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --deadline) deadline=$2; shift 2 ;;
    --phases) phases=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) sed -n '8,9p' "$0" >&2; exit 2 ;;
  esac
done
start=$SECONDS
out=${OUT:-$repo/gpu-out}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
carry="$repo/gpu-carry"
build="$repo/build-gpu"
jobs=$(nproc)
IFS=, read -r -a model_list <<< "$models"

note() { echo "$*" | tee -a "$summary"; }
want() { [[ ",$phases," == *",$1,"* ]]; }
left() { echo $(( deadline - (SECONDS - start) )); }
# bounded SECONDS CMD...: runs CMD for at most SECONDS, and never past the deadline (less a margin for
# the summary). Exit 124 when it was cut off or not started.
bounded() {
  local limit=$1; shift
  local l=$(( $(left) - 10 ))
  (( limit < l )) || limit=$l
  if (( limit <= 0 )); then echo "(not run: deadline reached) $*"; return 124; fi
  timeout -k 5 "$limit" "$@"
}
finish() {
  note "gpu.sh: done in $(( SECONDS - start )) s (deadline $deadline s)"
  echo "======== summary"
  cat "$summary"
  exit "${1:-0}"
}

# ---- the machine (nothing here may stop the script: a missing tool is a line in the file)
{
  for tool in nvidia-smi nvcc cmake compute-sanitizer python3; do
    command -v "$tool" >/dev/null 2>&1 || echo "$tool: not on PATH"
  done
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi
  command -v nvcc >/dev/null 2>&1 && nvcc --version
  command -v cmake >/dev/null 2>&1 && cmake --version | head -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn",
              torch.backends.cudnn.version(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' 2>&1
} > "$out/machine.txt" 2>&1
note "machine: $(grep -m1 -o 'NVIDIA [A-Z0-9].*GB[^|]*' "$out/machine.txt" | sed 's/ *$//'), driver $(grep -m1 -o 'Driver Version: [0-9.]*' "$out/machine.txt" | cut -d' ' -f3), nvcc $(grep -m1 -o 'release [0-9.]*' "$out/machine.txt" | cut -d' ' -f2), $(grep -m1 '^torch' "$out/machine.txt")"

# cuDNN: the toolkit's or the system's, else the one PyTorch's wheels bring. The library is named by its
# full path, so CMake puts its folder in the binaries' RUNPATH and nothing needs LD_LIBRARY_PATH (which
# would leak into the PyTorch runs).
cudnn_args=()
py_cudnn=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null || true)
for dir in ${CUDNN_ROOT:-} /usr/local/cuda /usr /usr/local/cuda/targets/x86_64-linux $py_cudnn; do
  [[ -n "$dir" && -d "$dir" ]] || continue
  header=$(find "$dir/include" "$dir/include/x86_64-linux-gnu" -maxdepth 1 -name cudnn.h 2>/dev/null | head -1)
  lib=$(find "$dir/lib" "$dir/lib64" "$dir/lib/x86_64-linux-gnu" -maxdepth 1 -name 'libcudnn.so.9*' 2>/dev/null | sort | head -1)
  if [[ -n "$header" && -n "$lib" ]]; then
    cudnn_args=(-DCUDNN_INCLUDE_DIR="$(dirname "$header")" -DCUDNN_LIBRARY="$lib")
    note "cuDNN: $lib"
    break
  fi
done
[[ ${#cudnn_args[@]} -gt 0 ]] || note "cuDNN: not found"

dep_args=()
[[ -d "$carry" ]] && dep_args=(-DEigen3_DIR="$carry/eigen/share/eigen3/cmake" -DGTEST_ROOT="$carry/gtest"
                               -DZLIB_ROOT="$carry/zlib")
# train's default data folder, and so the data-dependent tests' (engine/data/idx.h).
[[ -d "$carry/data" ]] && export CRUMB_DATA="$carry/data"
data=${CRUMB_DATA:-/usr/share/datasets/fashion-mnist}

# ---- build: the whole log is kept (the first compiler error is what matters)
if want build; then
  bounded 240 cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCRUMB_BUILD_BENCH=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 "${cudnn_args[@]}" "${dep_args[@]}" > "$out/build.log" 2>&1
  configured=$?
  if [[ $configured != 0 ]] || ! grep -q 'crumb: CUDA toolkit found: ON' "$out/build.log" \
     || ! grep -q 'crumb: cuDNN found: ON' "$out/build.log"; then
    note "BUILD: configure failed or did not find CUDA and cuDNN (exit $configured); see build.log:"
    grep -E 'crumb:|CMake (Error|Warning)|not found' "$out/build.log" | head -n 10 | tee -a "$summary"
    finish 1
  fi
  t0=$SECONDS
  if ! bounded 300 cmake --build "$build" -j "$jobs" >> "$out/build.log" 2>&1; then
    note "BUILD: FAILED after $(( SECONDS - t0 )) s; first errors:"
    grep -m 10 -E 'error|Error' "$out/build.log" | tee -a "$summary"
    finish 1
  fi
  note "build: ok in $(( SECONDS - t0 )) s"
fi
tests="$build/crumb_tests"
[[ -x "$tests" ]] || { note "no $tests: run the build phase"; finish 1; }

# The GPU tests, one process each (a fault or hang in one cannot take the others down); a failure is run
# again with cuDNN's logging on.
# CudaEngine.*, CudaKernels.*, ..., TrainCli.DeviceCuda, Optimizer.*OnCuda, and the op cases' CUDA modes
gpu_filter='Cuda*:*Cuda:OpParity.*:OpAccumulate.Cuda/*'
mapfile -t gpu_tests < <("$tests" --gtest_list_tests --gtest_filter="$gpu_filter" 2>/dev/null |
                         awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }')
if want cuda; then
  : > "$out/cuda_tests.log"
  passed=0 failed=()
  for t in "${gpu_tests[@]}"; do
    if bounded 120 "$tests" --gtest_filter="$t" >> "$out/cuda_tests.log" 2>&1; then
      passed=$((passed + 1))
    else
      failed+=("$t")
      echo "==== $t again, with CUDNN_LOGLEVEL_DBG=2" >> "$out/cuda_tests.log"
      CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr bounded 120 "$tests" --gtest_filter="$t" >> "$out/cuda_tests.log" 2>&1
    fi
  done
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$out/cuda_tests.log")
  note "cuda tests: $passed of ${#gpu_tests[@]} passed ($skipped skipped)${failed:+; FAILED: ${failed[*]}}"
fi

if want cpu; then
  bounded 240 ctest --test-dir "$build" -j "$jobs" -E "^Cuda|Cuda$|^OpParity\\.|^OpAccumulate\\.Cuda/" --output-on-failure \
    > "$out/cpu_tests.log" 2>&1
  note "other tests: $(grep -E 'tests passed|tests failed' "$out/cpu_tests.log" | tail -1)"
  grep -A20 'The following tests FAILED' "$out/cpu_tests.log" | tee -a "$summary"
fi

# ---- the same training on the GPU and on the CPU: test accuracy must agree within 0.5 points. Also on
# the GPU with TF32 allowed (its accuracy effect) and without CUDA graphs (what replaying them gains).
if want train; then
  : > "$out/train.log"
  for m in "${model_list[@]}"; do
    for variant in "cuda" "cuda --tf32" "cuda --cuda-graphs off" "cpu"; do
      line=$(bounded 150 "$build/train" --model "$m" --device $variant --epochs "$epochs" --batch "$batch" \
               --lr 0.05 --momentum 0.9 --seed 0 --threads "$jobs" --data "$data" "${extra[@]}" 2>> "$out/train.log" | tail -1)
      echo "$m $variant $line" >> "$out/train.log"
      acc=$(sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p' <<< "$line")
      loss=$(sed -n 's/.*"final_loss":\([0-9.]*\).*/\1/p' <<< "$line")
      sps=$(sed -n 's/.*"samples_per_s":\([0-9.]*\).*/\1/p' <<< "$line")
      note "train $m --device $variant: test accuracy ${acc:-FAILED}, loss ${loss:-?}, ${sps:-?} samples/s"
    done
  done
  note "$(grep -m1 '^device:' "$out/train.log")"
fi

# ---- what replaying CUDA graphs gains: Crumb with and without, interleaved, best of --repeat each
if want graphs; then
  for m in "${model_list[@]}"; do
    best_on=0 best_off=0
    for ((r = 0; r < repeat; ++r)); do
      for g in on off; do
        line=$(bounded 60 "$build/train" --model "$m" --device cuda --cuda-graphs "$g" --epochs "$epochs" \
                 --batch "$batch" --seed 0 --data "$data" "${extra[@]}" 2>> "$out/train.log" | tail -1)
        sps=$(sed -n 's/.*"samples_per_s":\([0-9.]*\).*/\1/p' <<< "$line")
        sps=${sps%.*}
        if [[ $g == on ]]; then (( ${sps:-0} > best_on )) && best_on=$sps; else (( ${sps:-0} > best_off )) && best_off=$sps; fi
      done
    done
    ratio=$(python3 -c "print(f'{$best_on / max($best_off, 1):.3f}')")
    note "graphs $m (best of $repeat, samples/s): on $best_on, off $best_off, ratio $ratio"
  done
fi

# ---- against PyTorch on the same GPU: Crumb's float32 against PyTorch in float32, then Crumb with --tf32
# against PyTorch's defaults (TF32 convolutions).
if want compare; then
  : > "$out/compare.log"
  for pair in "off:" "default:--tf32"; do
    tf32=${pair%%:*} crumb_flag=${pair#*:}
    for m in "${model_list[@]}"; do
      bounded 200 env CRUMB_BENCH_PYTHON=python3 "$repo/tools/bench/compare.sh" --model "$m" --device cuda \
        --batch "$batch" --epochs "$epochs" --repeat "$repeat" --threads "$jobs" --data "$data" \
        --crumb "$build/train" --torch-tf32 "$tf32" -- $crumb_flag "${extra[@]}" > "$out/compare.tmp" 2>> "$out/compare.log"
      cat "$out/compare.tmp" >> "$out/compare.log"
      row=$(grep -E "^$m " "$out/compare.tmp")
      note "compare (crumb ${crumb_flag:-fp32}, torch tf32 $tf32): ${row:-FAILED, see compare.log}"
    done
  done
  rm -f "$out/compare.tmp"
fi

# ---- a memory budget on the GPU: 8x the batch under a budget that forces micro-batches of about the
# in-memory run's size, against that in-memory run.
if want budget; then
  : > "$out/budget.tmp"
  for spec in "cnn 2048 16384 270MiB" "lenet5 4096 32768 100MiB"; do
    read -r m full big budget <<< "$spec"
    bounded 150 "$repo/tools/bench/microbatch.sh" --model "$m" --device cuda --full-batch "$full" --batch "$big" \
      --budget "$budget" --epochs 3 --repeat "$repeat" --threads "$jobs" --data "$data" --crumb "$build/train" \
      >> "$out/budget.tmp" 2>> "$out/train.log"
    note "budget $m: $(grep '"throughput_ratio"' "$out/budget.tmp" | tail -1)"
  done
  cat "$out/budget.tmp" >> "$out/train.log"
  rm -f "$out/budget.tmp"
fi

# ---- swapping (copy stream, pinned host pool) and recomputation on the GPU: each strategy's least budget
# and step time at one BatchNorm group of ResNet-50 224x224 (tools/bench/strategy_bench.py).
if want swap; then
  bounded 240 python3 "$repo/tools/bench/strategy_bench.py" --train "$build/train" --models resnet50 --device cuda \
    --input 3x224x224 --repeat 2 > "$out/swap.tmp" 2>> "$out/train.log"
  note "swap: $(tail -n 1 "$out/swap.tmp")"
  cat "$out/swap.tmp" >> "$out/train.log"
  rm -f "$out/swap.tmp"
fi

# ---- compute-sanitizer, last: memcheck over the GPU tests (not the free-memory one: the tool's own
# allocations move it), racecheck and synccheck over the kernels that use shared memory or shuffles.
# Judged by each run's ERROR SUMMARY line; API errors that the code handles itself are not reported.
if want sanitize; then
  : > "$out/sanitizer.log"
  memcheck_filter="Cuda*:*OnCuda:OpParity.*:OpAccumulate.Cuda/*:-CudaEngine.TrainingLoopAllocatesNothing"
  for tool in memcheck racecheck synccheck; do
    filter=$memcheck_filter
    [[ $tool != memcheck ]] && filter='CudaKernels.*'
    bounded 240 compute-sanitizer --tool "$tool" --report-api-errors no "$tests" --gtest_filter="$filter" \
      > "$out/sanitizer.tmp" 2>&1
    { echo "==== $tool $filter"; cat "$out/sanitizer.tmp"; } >> "$out/sanitizer.log"
    verdict=$(grep -oE '(ERROR|RACECHECK) SUMMARY.*' "$out/sanitizer.tmp" | tail -1)
    note "compute-sanitizer $tool: ${verdict:-no ERROR SUMMARY line (cut off or failed to start)}"
  done
  rm -f "$out/sanitizer.tmp"
fi

finish 0
