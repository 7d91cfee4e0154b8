#!/usr/bin/env bash
# Everything the GPU machine is for, in calls that fit its limits (one command of at most 10 minutes, at
# most 8 files back): find cuDNN, NCCL and MPI, build with CUDA, run the GPU tests and compute-sanitizer,
# the ResNets (float32, TF32, bf16) against PyTorch, the kernel microbenchmarks, the copy bandwidths, the
# NCCL path under mpirun, ResNet-50 beyond its memory, the rest of the suite, train on the GPU and the CPU
# side by side, compare with the machine's PyTorch. Every phase is bounded against one deadline, so
# whatever ran comes back; phases that no longer fit are skipped and say so. Files go to $OUT (or
# ./gpu-out); summary.txt is printed last.
#
# usage: tools/bench/gpu.sh [--deadline 560] [--phases LIST] [--models lenet5,cnn] [--batch 256]
#          [--epochs 2] [--repeat 3] [--kernel-suites a,b] [--kernel-min-time 0.05]
#          [--sanitize-filter GTEST_FILTER|all] [--resnet20-train N] [--resnet50-input 3x224x224]
#          [--resnet50-batch 64] [--resnet50-samples 1024] [--race-device cuda]
#          [--race-variants fp32,tf32,bf16,bf16-nchw] [-- extra train flags]
# LIST, comma-separated, run in this order whatever the order given: build (configure + build; configure
#   alone configures only), cuda, sanitize, resnets, fusion, kernels, bandwidth, nccl, beyond, cpu, train, graphs,
#   compare, budget, swap, predictions. Default: all of them (more than one call can hold: pick some).
# The --resnet* flags size the resnets and fusion phases (resnet20: 0 = the whole epoch); --race-device cpu with small
#   sizes rehearses them and the predictions phase on a machine without a GPU (CRUMB_GPU_BUILD=build, and CRUMB_BENCH_PYTHON naming a
#   python with torch).
# Needs gpu-carry/ (tools/bench/gpu_carry.sh) where the machine lacks Eigen, GoogleTest, zlib, Google
# Benchmark, Open MPI or the data. CRUMB_GPU_BUILD sets the build folder (default build-gpu/).
# Files back (8 at most): summary.txt, machine.txt, build.log, tests.log (GPU tests, other tests,
# compute-sanitizer), train.log (every measuring phase), compare.log, kernels.json, kernels.svg.
set -uo pipefail  # no -e: a failing phase is recorded and the next one still runs

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
all_phases=build,cuda,sanitize,resnets,fusion,kernels,bandwidth,nccl,beyond,cpu,train,graphs,compare,budget,swap,predictions
deadline=560 phases=$all_phases models=lenet5,cnn batch=256 epochs=2 repeat=3
kernel_suites=resnet50_224,deepbench,vgg11_bn_224,resnet18_28,resnet20,resnet20_28,vgg11_bn_32,cnn,lenet5
kernel_min_time=0.05
sanitize_filter="CudaKernels.*:CudaNormChecks.*:CudaPoolChecks.*:*OnCuda:OpParity.CpuVsCuda/*Norm*:OpParity.CpuVsCuda/*Pool*:OpParity.CpuVsCuda/Dropout*:OpParity.CpuVsCuda/Nhwc*:OpParity.CpuVsCuda/ConvReluSwapped"
race_variants=fp32,tf32,bf16,bf16-nchw resnet20_train=0 resnet50_input=3x224x224 resnet50_batch=64 resnet50_samples=1024 race_device=cuda
extra=()
usage() { sed -n '/^# usage:/,/^# Needs/p' "$0" | sed '$d' >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --deadline) deadline=$2; shift 2 ;;
    --phases) phases=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --kernel-suites) kernel_suites=$2; shift 2 ;;
    --kernel-min-time) kernel_min_time=$2; shift 2 ;;
    --sanitize-filter) sanitize_filter=$2; shift 2 ;;
    --resnet20-train) resnet20_train=$2; shift 2 ;;
    --resnet50-input) resnet50_input=$2; shift 2 ;;
    --resnet50-batch) resnet50_batch=$2; shift 2 ;;
    --resnet50-samples) resnet50_samples=$2; shift 2 ;;
    --race-device) race_device=$2; shift 2 ;;
    --race-variants) race_variants=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) usage ;;
  esac
done
for p in ${phases//,/ }; do
  [[ ",$all_phases,configure," == *",$p,"* ]] || { echo "gpu.sh: unknown phase '$p'" >&2; usage; }
done
start=$SECONDS
out=${OUT:-$repo/gpu-out}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
tmpd=$(mktemp -d)  # scratch: never under $out, whose files all come back
trap 'rm -rf "$tmpd"' EXIT
carry="$repo/gpu-carry"
build=${CRUMB_GPU_BUILD:-$repo/build-gpu}
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
# json_field NAME LINE: a number from a train JSON summary line.
json_field() { sed -n "s/.*\"$1\":\([0-9.eE+-]*\).*/\1/p" <<< "$2"; }
finish() {
  note "gpu.sh: done in $(( SECONDS - start )) s (deadline $deadline s)"
  local files
  files=$(find "$out" -type f | wc -l)
  (( files <= 8 )) || note "gpu.sh: $files files under $out: the device tool brings back 8 at most"
  echo "======== summary"
  cat "$summary"
  exit "${1:-0}"
}

# ---- MPI: the machine's, else the Open MPI runtime in gpu-carry/mpi, relocated (gpu_carry.sh). Exported
# here, so that every Crumb binary (linked with libmpi when MPI is found) and mpirun find it.
mpi_args=() mpi_from=none
if command -v mpicxx >/dev/null 2>&1 && mpirun --version >/dev/null 2>&1; then
  mpi_from="the machine's ($(command -v mpirun))"
elif [[ -f "$carry/mpi/bin/orterun" ]]; then
  chmod +x "$carry"/mpi/bin/orte* 2>/dev/null  # in case the copy lost the modes
  mpi_prefix="$carry/mpi"
  mpi_lib="$mpi_prefix/lib/x86_64-linux-gnu/openmpi/lib"
  export OPAL_PREFIX="$mpi_prefix" PMIX_MCA_mca_base_component_path="$mpi_prefix/pmix/lib/pmix"
  export LD_LIBRARY_PATH="$mpi_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" PATH="$mpi_prefix/bin:$PATH"
  mpi_args=(-DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_CXX_SKIP_MPICXX=ON -DMPI_CXX_LIB_NAMES=mpi
            -DMPI_mpi_LIBRARY="$mpi_lib/libmpi.so.40" -DMPI_CXX_HEADER_DIR="$mpi_prefix/lib/x86_64-linux-gnu/openmpi/include"
            -DMPIEXEC_EXECUTABLE="$mpi_prefix/bin/mpirun")
  mpi_from="carried ($mpi_prefix)"
fi
# Open MPI refuses root without these; the machine runs commands as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ---- the machine (nothing here may stop the script: a missing tool is a line in the file)
{
  for tool in nvidia-smi nvcc cmake ninja compute-sanitizer python3 mpirun; do
    command -v "$tool" >/dev/null 2>&1 || echo "$tool: not on PATH"
  done
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -q | grep -A2 -E 'PCIe Generation|Link Width' | head -12
  command -v nvcc >/dev/null 2>&1 && nvcc --version
  command -v cmake >/dev/null 2>&1 && cmake --version | head -1
  echo "cores: $jobs; $(free -g | awk '/^Mem/ {print "memory: " $2 " GiB, " $7 " GiB available"}')"
  echo "MPI: $mpi_from"; mpirun --version 2>&1 | head -1
  ldconfig -p 2>/dev/null | grep -E 'libmpi\.so|libnccl\.so|libcudnn\.so' | head -6
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn",
              torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-",
              torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' 2>&1
} > "$out/machine.txt" 2>&1
gpu=$(grep -m1 -o 'NVIDIA [A-Z0-9].*GB[^|]*' "$out/machine.txt" | sed 's/ *$//')
driver=$(grep -m1 -o 'Driver Version: [0-9.]*' "$out/machine.txt" | cut -d' ' -f3)
nvcc=$(grep -m1 -o 'release [0-9.]*' "$out/machine.txt" | cut -d' ' -f2)
note "machine: $gpu, driver $driver, nvcc $nvcc, $(grep -m1 '^torch' "$out/machine.txt"); MPI: $mpi_from"

# cuDNN and NCCL: the toolkit's or the system's, else the ones PyTorch's wheels bring. Each library is
# named by its full path, so CMake puts its folder in the binaries' RUNPATH and nothing needs
# LD_LIBRARY_PATH (which would leak into the PyTorch runs).
# find_lib NAME HEADER SONAME-GLOB DIR...: prints "-DNAME_INCLUDE_DIR=... -DNAME_LIBRARY=..." for the first
# DIR holding both.
find_lib() {
  local name=$1 header=$2 glob=$3 dir h l; shift 3
  for dir in "$@"; do
    [[ -n "$dir" && -d "$dir" ]] || continue
    h=$(find "$dir/include" "$dir/include/x86_64-linux-gnu" -maxdepth 1 -name "$header" 2>/dev/null | head -1)
    l=$(find "$dir/lib" "$dir/lib64" "$dir/lib/x86_64-linux-gnu" -maxdepth 1 -name "$glob" 2>/dev/null | sort | head -1)
    if [[ -n "$h" && -n "$l" ]]; then
      echo "-D${name}_INCLUDE_DIR=$(dirname "$h")"
      echo "-D${name}_LIBRARY=$l"
      return 0
    fi
  done
  return 1
}
wheel() { python3 -c "import nvidia.$1 as m; print(list(m.__path__)[0])" 2>/dev/null || true; }
mapfile -t cudnn_args < <(find_lib CUDNN cudnn.h 'libcudnn.so.9*' ${CUDNN_ROOT:-} /usr/local/cuda /usr \
                            /usr/local/cuda/targets/x86_64-linux "$(wheel cudnn)")
mapfile -t nccl_args < <(find_lib NCCL nccl.h 'libnccl.so.2*' ${NCCL_ROOT:-} /usr/local/cuda /usr \
                           /usr/local/cuda/targets/x86_64-linux "$(wheel nccl)")
cudnn_lib=${cudnn_args[1]:-=not found} nccl_lib=${nccl_args[1]:-=not found}
note "cuDNN: ${cudnn_lib#*=}; NCCL: ${nccl_lib#*=}"

dep_args=()
[[ -d "$carry" ]] && dep_args=(-DEigen3_DIR="$carry/eigen/share/eigen3/cmake" -DGTEST_ROOT="$carry/gtest"
                               -DZLIB_ROOT="$carry/zlib" -DZLIB_LIBRARY="$carry/zlib/lib/libz.so" -DZLIB_LIBRARY_RELEASE="$carry/zlib/lib/libz.so"
                               -DZLIB_INCLUDE_DIR="$carry/zlib/include")
[[ -d "$carry/benchmark" ]] && dep_args+=(-Dbenchmark_DIR="$carry/benchmark/lib/x86_64-linux-gnu/cmake/benchmark")
# train's default data folder, and so the data-dependent tests' (engine/data/idx.h).
[[ -d "$carry/data" ]] && export CRUMB_DATA="$carry/data"
data=${CRUMB_DATA:-/usr/share/datasets/fashion-mnist}

# ---- configure and build: the whole log is kept (the first compiler error is what matters)
if want build || want configure; then
  bounded 240 cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCRUMB_BUILD_BENCH=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 "${cudnn_args[@]}" "${nccl_args[@]}" "${mpi_args[@]}" "${dep_args[@]}" \
    > "$out/build.log" 2>&1
  configured=$?
  grep -E '^-- crumb:' "$out/build.log" | sed 's/^-- //' | tr '\n' ';' | sed 's/;$/\n/' | tee -a "$summary"
  if [[ $configured != 0 ]] || ! grep -q 'crumb: CUDA toolkit found: ON' "$out/build.log" \
     || ! grep -q 'crumb: cuDNN found: ON' "$out/build.log"; then
    note "BUILD: configure failed or did not find CUDA and cuDNN (exit $configured); see build.log:"
    grep -E 'crumb:|CMake (Error|Warning)|not found' "$out/build.log" | head -n 10 | tee -a "$summary"
    finish 1
  fi
  grep -q 'crumb: NCCL found (with MPI): ON' "$out/build.log" || note "build: no NCCL path (the nccl phase needs MPI and NCCL)"
  grep -q 'kernels_bench is not built' "$out/build.log" && note "build: no kernels_bench (Google Benchmark not found)"
  want build || finish 0
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
tests_log="$out/tests.log"
train_log="$out/train.log"

# ---- the GPU tests: all in one process first (each process pays for CUDA, cuBLAS and cuDNN start-up,
# a few seconds); a failure is run again alone with cuDNN's logging on. Where that process did not get to
# its end (a fault, a hang), every test runs in a process of its own.
# CudaEngine.*, CudaKernels.*, ..., TrainCli.DeviceCuda, Optimizer.*OnCuda, and the op cases' CUDA modes
# (OpParity.CpuVsCuda/*: every op, BatchNorm, GroupNorm, dropout and adaptive pooling included).
gpu_filter='Cuda*:*Cuda:OpParity.*:OpAccumulate.Cuda/*'
mapfile -t gpu_tests < <("$tests" --gtest_list_tests --gtest_filter="$gpu_filter" 2>/dev/null |
                         awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }')
if want cuda; then
  t0=$SECONDS
  echo "==== GPU tests ($gpu_filter), one process" >> "$tests_log"
  bounded 240 "$tests" --gtest_filter="$gpu_filter" > "$tmpd/cuda.log" 2>&1
  cat "$tmpd/cuda.log" >> "$tests_log"
  failed=() again=()
  if grep -qE '^\[  PASSED  \] [0-9]+ test' "$tmpd/cuda.log"; then  # it got to its end: rerun its failures alone
    passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$tmpd/cuda.log")
    mapfile -t failed < <(awk '/^\[  FAILED  \] [0-9]+ tests?, listed below:/ { f = 1; next }
                               f && /^\[  FAILED  \] / { sub(/^\[  FAILED  \] /, ""); sub(/,.*/, ""); print }' "$tmpd/cuda.log")
    each=0 alone=("${failed[@]}")
  else
    note "cuda tests: the one process did not finish ($(tail -n 1 "$tmpd/cuda.log")); one process each"
    passed=0 each=1 alone=("${gpu_tests[@]}")
  fi
  for t in "${alone[@]}"; do
    echo "==== $t alone" >> "$tests_log"
    if bounded 120 "$tests" --gtest_filter="$t" >> "$tests_log" 2>&1; then
      if (( each )); then passed=$((passed + 1)); else again+=("$t"); fi
    else
      (( each )) && failed+=("$t")
      echo "==== $t again, with CUDNN_LOGLEVEL_DBG=2" >> "$tests_log"
      CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr bounded 120 "$tests" --gtest_filter="$t" >> "$tests_log" 2>&1
    fi
  done
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$tmpd/cuda.log")
  note "cuda tests: $passed of ${#gpu_tests[@]} passed ($skipped skipped) in $(( SECONDS - t0 )) s${failed:+; FAILED: ${failed[*]}}${again:+; of those, passed alone: ${again[*]}}"
  note "cuda tests: slowest: $(sed -n 's/^\[       OK \] \(.*\) (\([0-9]*\) ms)$/\2 \1/p' "$tmpd/cuda.log" | sort -rn | head -n 4 |
                               awk '{ printf "%s %.1f s; ", $2, $1 / 1000 }')"
  # The 16-bit tests' measured errors (their bounds are estimates: CudaPrecision.TrainingStepMatchesCpu).
  grep 'against float32, normwise' "$tmpd/cuda.log" | sed 's/^/precision: /' | tee -a "$summary"
fi

# ---- compute-sanitizer, straight after the tests it runs: memcheck over the GPU tests of
# --sanitize-filter (default: the kernels written since the last GPU session and the tests that reach
# them; "all" for every GPU test but the free-memory one, whose figure the tool's own allocations move),
# racecheck and synccheck over the kernels that use shared memory or shuffles (the kernel tests, and the
# norm, dropout and adaptive-pool op cases). Judged by each run's ERROR SUMMARY line; API errors that the
# code handles itself are not reported.
if want sanitize; then
  [[ $sanitize_filter == all ]] && sanitize_filter="$gpu_filter:-CudaEngine.TrainingLoopAllocatesNothing"
  for tool in memcheck racecheck synccheck; do
    filter=$sanitize_filter
    [[ $tool != memcheck ]] &&
      filter='CudaKernels.*:OpParity.CpuVsCuda/*Norm*:OpParity.CpuVsCuda/Dropout*:OpParity.CpuVsCuda/AdaptiveAvgPool*'
    t0=$SECONDS
    bounded 150 compute-sanitizer --tool "$tool" --report-api-errors no "$tests" --gtest_filter="$filter" \
      > "$tmpd/sanitizer.txt" 2>&1
    { echo "==== compute-sanitizer $tool $filter"; cat "$tmpd/sanitizer.txt"; } >> "$tests_log"
    verdict=$(grep -oE '(ERROR|RACECHECK) SUMMARY.*' "$tmpd/sanitizer.txt" | tail -1)
    note "compute-sanitizer $tool ($(( SECONDS - t0 )) s, $(grep -cE '^\[       OK \]' "$tmpd/sanitizer.txt") tests passed):" \
         "${verdict:-no ERROR SUMMARY line (cut off or failed to start)}"
  done
fi

# ---- ResNets against PyTorch on the same device (issue 25; issue 27's bf16 figure): resnet20 on
# Fashion-MNIST written as CIFAR-10 files (3x32x32, tools/bench/fashion_cifar.py) at batch 128, one epoch
# (--resnet20-train caps it), and ResNet-50 on synthetic --resnet50-input images (1000 classes) at batch
# --resnet50-batch, 2 epochs of --resnet50-samples, best of --repeat by samples/s (both sides count their
# first steps: plans, cuDNN start-up, Crumb's CUDA-graph capture), interleaved. race PHASE VARIANT...: each
# VARIANT is "name|crumb flags|torch flags" (no torch flags: a Crumb variant measured against the one before
# it, whose gain it reports as "gain_label"). Eager PyTorch (cuDNN's default heuristics, no torch.compile).
# Test accuracy is the best run's mean over the runs.
race() {
  local phase=$1; shift
  local variants=("$@") cifar="$tmpd/fashion-cifar" torch_py=${CRUMB_BENCH_PYTHON:-python3}
  [[ -d "$cifar" ]] || "$torch_py" "$repo/tools/bench/fashion_cifar.py" "$cifar" --data "$data" >> "$train_log" 2>&1 ||
    note "$phase: fashion_cifar.py FAILED (see train.log)"
  declare -A best=() accs=()
  # keep KEY LINE: KEY's best samples/s so far, and every run's test accuracy (one epoch at this lr leaves
  # BatchNorm's running statistics noisy: the mean over the runs is what the two sides are compared by).
  keep() {
    local sps acc
    sps=$(json_field samples_per_s "$2") acc=$(json_field test_accuracy "$2")
    [[ -n "$sps" ]] || return 0
    awk -v a="$sps" -v b="${best[$1]:-0}" 'BEGIN { exit !(a > b) }' && best[$1]=$sps
    accs[$1]+=" $acc"
  }
  mean_acc() { awk '{ for (i = 1; i <= NF; ++i) s += $i } END { if (NF) printf "%.4f over %d", s / NF, NF; else print "?" }' <<< "${accs[$1]:-}"; }
  for ((r = 0; r < repeat; ++r)); do
    for m in resnet20 resnet50; do
      if [[ $m == resnet20 ]]; then
        set_=(--model resnet20 --dataset cifar10 --data "$cifar" --batch 128 --epochs 1 --lr 0.05)
        (( resnet20_train > 0 )) && set_+=(--limit-train "$resnet20_train")
      else
        set_=(--model resnet50 --dataset synthetic --input "$resnet50_input" --classes 1000 --batch "$resnet50_batch"
              --epochs 2 --limit-train "$resnet50_samples" --lr 0.01)
      fi
      set_+=(--momentum 0.9 --seed 0 --threads "$jobs" --device "$race_device")
      crumb_set=(--bn-group batch)  # BatchNorm over the whole batch, as PyTorch's
      for v in "${variants[@]}"; do
        IFS='|' read -r name crumb_flags torch_flags <<< "$v"
        [[ ",$race_variants," == *",$name,"* ]] || continue
        limit_test=()
        [[ $m == resnet50 ]] && limit_test=(--limit-test "$resnet50_batch")  # synthetic: accuracy means nothing
        # shellcheck disable=SC2086
        line=$(bounded 150 "$build/train" "${set_[@]}" "${crumb_set[@]}" $crumb_flags "${limit_test[@]}" "${extra[@]}" 2>> "$train_log" | tail -n 1)
        echo "$phase $m $name crumb: $line" >> "$train_log"
        keep "$m $name crumb" "$line"
        [[ -n "$torch_flags" ]] || continue
        # shellcheck disable=SC2086
        line=$(bounded 150 "$torch_py" "$repo/tools/bench/torch_reference.py" "${set_[@]}" $torch_flags 2>> "$train_log" | tail -n 1)
        echo "$phase $m $name torch: $line" >> "$train_log"
        keep "$m $name torch" "$line"
      done
    done
  done
  for m in resnet20 resnet50; do
    local before=""
    for v in "${variants[@]}"; do
      IFS='|' read -r name crumb_flags torch_flags <<< "$v"
      c=${best[$m $name crumb]:-0} t=${best[$m $name torch]:-0}
      if [[ ",$race_variants," != *",$name,"* ]]; then before=""; continue; fi
      row="$phase $m $name on $race_device (best of $repeat, samples/s): crumb $c (test accuracy $(mean_acc "$m $name crumb"))"
      if [[ -n "$torch_flags" ]]; then
        row+=", torch $t ($(mean_acc "$m $name torch")), ratio $(python3 -c "print(f'{$c / $t:.3f}' if $t else 'n/a (a side failed: see train.log)')")"
      elif [[ -n "$before" ]]; then
        row+=", $gain_label $(python3 -c "b = ${best[$m $before crumb]:-0}; print(f'{b / $c:.3f}x' if $c else 'n/a')")"
      fi
      note "$row"
      before=$name
    done
  done
}

# Target: ratio >= 1.0 on each: Crumb float32 against PyTorch eager float32 (TF32 off), Crumb --tf32 against
# PyTorch's defaults (TF32 convolutions), Crumb --precision bf16 (channels-last) against PyTorch autocast bf16
# with channels_last; Crumb bf16 in NCHW beside them, for what the NHWC plan gains.
if want resnets; then
  gain_label="channels-last's gain"
  race resnets "fp32||--tf32 off" "tf32|--tf32|--tf32 default" \
    "bf16|--precision bf16 --channels-last on|--precision bf16 --channels-last --tf32 default" \
    "bf16-nchw|--precision bf16 --channels-last off|"
fi

# Fusion (issue 38): the same races with Crumb fused (the default) and unfused (--fuse off) side by side,
# float32 (TF32 off; and TF32 against PyTorch's defaults) and bf16 channels-last. Target: fused >= 1.2x
# PyTorch eager in each precision; "fusion's gain" is fused over unfused.
if want fusion; then
  gain_label="fusion's gain"
  saved_variants=$race_variants
  [[ ",$race_variants," == *",fp32-unfused,"* ]] || race_variants+=",fp32-unfused,tf32-unfused,bf16-unfused"
  race fusion "fp32||--tf32 off" "fp32-unfused|--fuse off|" "tf32|--tf32|--tf32 default" "tf32-unfused|--tf32 --fuse off|" \
    "bf16|--precision bf16 --channels-last on|--precision bf16 --channels-last --tf32 default" \
    "bf16-unfused|--precision bf16 --channels-last on --fuse off|"
  race_variants=$saved_variants
fi

# ---- kernel microbenchmarks on the GPU (issue 11): Crumb's kernels against cuDNN's exhaustive search and
# cuBLAS, FP32 and TF32, every suite in a process of its own (a suite cut off by the deadline loses only
# itself: its JSON is salvaged up to its last complete benchmark), merged into kernels.json and plotted.
if want kernels; then
  kb="$build/kernels_bench"
  if [[ ! -x "$kb" ]]; then
    note "kernels: no $kb (Google Benchmark not found at configure: carry gpu-carry/benchmark)"
  else
    for s in ${kernel_suites//,/ }; do
      t0=$SECONDS
      echo "==== kernels_bench --device=cuda --suites=$s" >> "$train_log"
      bounded 240 "$kb" --device=cuda --suites="$s" --benchmark_min_time="$kernel_min_time" \
        --benchmark_out="$tmpd/kernels_$s.json" --benchmark_out_format=json > "$tmpd/kernels_$s.txt" 2>&1
      rc=$?
      grep -vE '^cuda/' "$tmpd/kernels_$s.txt" | tail -n 20 >> "$train_log"  # errors and context, not every row
      # A benchmark that throws is an error row (SkipWithError) and its suite goes on; an error outside the
      # benchmarks (start-up, the ceilings) ends the process, and kernels_bench's one error line names it.
      note "kernels $s: exit $rc in $(( SECONDS - t0 )) s, $(grep -cE '^cuda/' "$tmpd/kernels_$s.txt") rows" \
           "$(grep -m1 '^kernels_bench: ' "$tmpd/kernels_$s.txt")"
    done
    python3 - "$out/kernels.json" "$tmpd"/kernels_*.json <<'PY' 2>&1 | tee -a "$summary"
import json, statistics, sys
merged, context = [], None
for path in sys.argv[2:]:
    text = open(path).read()
    try:
        d = json.loads(text)
    except ValueError:  # cut off: keep every complete benchmark
        cut = text.rfind("\n    }")
        try:
            d = json.loads(text[:cut + 6] + "\n  ]\n}") if cut > 0 else {}
        except ValueError:
            d = {}
        print(f"kernels: {path.rsplit('/', 1)[-1]} was cut off; {len(d.get('benchmarks', []))} benchmarks kept")
    context = context or d.get("context")
    merged += d.get("benchmarks", [])
json.dump({"context": context or {}, "benchmarks": merged}, open(sys.argv[1], "w"), indent=1)
# Crumb against the best library implementation of the same work, per kernel: median and worst ratio of
# times (> 1: Crumb slower), Crumb's median % of the H100 peak, the largest workspace.
rows = {}
for b in merged:
    if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
        continue
    parts = [p for p in b["name"].split("/") if p not in ("manual_time", "real_time")]
    if len(parts) < 5 or parts[0] != "cuda":
        continue
    rows.setdefault((parts[1], parts[2], parts[3]), {})[parts[4]] = b
by_kernel = {}
for (kernel, suite, layer), impls in rows.items():
    if "crumb" not in impls:
        continue
    c = impls["crumb"]
    libs = [v for k, v in impls.items() if k in ("cudnn_find", "cublas", "cudnn")]
    ratio = c["real_time"] / min(v["real_time"] for v in libs) if libs else None
    by_kernel.setdefault(kernel, []).append((ratio, f"{suite}/{layer}", c.get("pct_peak", 0), c.get("workspace_bytes", 0)))
print(f"kernels: {len(merged)} benchmarks; crumb vs the best FP32 library call (time ratio), crumb's % of H100 peak")
print(f"  {'op':30} {'n':>4} {'median':>7} {'worst':>7} {'worst at':32} {'% peak':>7} {'max ws MiB':>10}")
for kernel, v in sorted(by_kernel.items()):
    r = [x for x in v if x[0] is not None]
    worst = max(r, key=lambda x: x[0]) if r else (None, "-", 0, 0)
    print(f"  {kernel:30} {len(v):4d} {statistics.median(x[0] for x in r) if r else float('nan'):7.2f} "
          f"{worst[0] or float('nan'):7.2f} {worst[1][:32]:32} {statistics.median(x[2] for x in v):7.1f} "
          f"{max(x[3] for x in v) / 2**20:10.1f}")
# The per-step passes over the parameter block: the divergence check (count_nonfinite) against the
# optimizer step itself, per model (issue 25: the check's cost as a share of the step).
passes, scale = {}, {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
for b in merged:
    parts = [p for p in b["name"].split("/") if p not in ("manual_time", "real_time")]
    if b.get("run_type", "iteration") == "iteration" and not b.get("error_occurred") and len(parts) == 4 \
       and parts[1] in ("count_nonfinite", "sgd_momentum_step", "adamw_step"):
        passes.setdefault(parts[2], {})[parts[1]] = b["real_time"] * scale.get(b.get("time_unit", "ns"), 1e-3)
for suite, t in sorted(passes.items()):
    print(f"kernels: {suite}: " + ", ".join(f"{k} {v:.1f} us" for k, v in sorted(t.items())))
PY
    python3 "$repo/tools/bench/kernels/plot.py" "$out/kernels.json" -o "$out/kernels.svg" --device cuda >> "$train_log" 2>&1 \
      && note "kernels: kernels.svg $(stat -c %s "$out/kernels.svg") bytes" || note "kernels: plot.py FAILED (see train.log)"
  fi
fi

# ---- host <-> device copy bandwidth (issue 12's cost model swaps over it): PyTorch's pinned and pageable
# copies each way and both ways at once, median of 20 timed with CUDA events, at 16 MiB (the size Crumb's
# cost model measures) and 1 GiB.
if want bandwidth; then
  bounded 120 python3 - <<'PY' > "$tmpd/bw.txt" 2>&1
import json, statistics, torch
assert torch.cuda.is_available(), "no GPU for PyTorch"
res = {}
def timed(fn, reps=20):
    fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts)
for mib in (16, 1024):
    n = mib << 20
    d = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    d2 = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    hp = torch.randint(0, 255, (n,), dtype=torch.uint8).pin_memory()
    hp2 = torch.empty(n, dtype=torch.uint8).pin_memory()
    hu = torch.randint(0, 255, (n,), dtype=torch.uint8)
    res[f"h2d_pinned_{mib}MiB_GBps"] = n / timed(lambda: d.copy_(hp, non_blocking=True)) / 1e9
    res[f"d2h_pinned_{mib}MiB_GBps"] = n / timed(lambda: hp2.copy_(d, non_blocking=True)) / 1e9
    res[f"h2d_pageable_{mib}MiB_GBps"] = n / timed(lambda: d.copy_(hu)) / 1e9
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    def both():
        cur = torch.cuda.current_stream()
        s1.wait_stream(cur); s2.wait_stream(cur)
        with torch.cuda.stream(s1): d2.copy_(hp, non_blocking=True)
        with torch.cuda.stream(s2): hp2.copy_(d, non_blocking=True)
        cur.wait_stream(s1); cur.wait_stream(s2)
    res[f"both_ways_pinned_{mib}MiB_GBps_total"] = 2 * n / timed(both) / 1e9
    dd = torch.empty_like(d)
    res[f"d2d_{mib}MiB_GBps_read_plus_write"] = 2 * n / timed(lambda: dd.copy_(d)) / 1e9
print(json.dumps({"bandwidth": {k: round(v, 2) for k, v in res.items()}}))
PY
  { echo "==== bandwidth"; cat "$tmpd/bw.txt"; } >> "$train_log"
  note "bandwidth: $(tail -n 1 "$tmpd/bw.txt")"
fi

# ---- the NCCL path (issue 13) on this one GPU: the same training as one process and as one rank under
# mpirun (NCCL communicator, gradient buckets summed by ncclAllReduce while the last micro-batch's
# backward runs); the weights must agree bit for bit, as two plain runs do (--deterministic: without it
# cuDNN's backward algorithms that add with atomics make every run differ in the last bits). Then the CPU MPI tests (2 ranks) through the same mpirun.
if want nccl; then
  if ! ldd "$build/train" 2>/dev/null | grep -q libnccl; then
    note "nccl: not run: this build has no NCCL path (configure needs MPI and NCCL; see build.log)"
  else
    mpi_run=(mpirun -np 1)
    mpirun --version 2>&1 | grep -q 'Open MPI' && mpi_run+=(--bind-to none --mca btl self,vader)
    common=(--model cnn --device cuda --batch 256 --micro-batch 64 --epochs 1 --limit-train 8192 --limit-test 1024
            --seed 0 --lr 0.05 --momentum 0.9 --threads "$jobs" --data "$data" --deterministic)
    for run in plain again nccl; do
      launcher=()
      [[ $run == nccl ]] && launcher=("${mpi_run[@]}")
      echo "==== nccl phase: $run: ${launcher[*]} train ${common[*]}" >> "$train_log"
      bounded 150 "${launcher[@]}" "$build/train" "${common[@]}" --save "$tmpd/$run.safetensors" \
        > "$tmpd/$run.out" 2>> "$train_log"
      rc=$?
      echo "$run exit $rc: $(tail -n 1 "$tmpd/$run.out")" >> "$train_log"
      if [[ $run == nccl && $rc != 0 ]]; then  # NCCL's own account, and its bootstrap on the loopback interface
        echo "==== nccl phase: again with NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo" >> "$train_log"
        NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=lo bounded 150 "${launcher[@]}" \
          "$build/train" "${common[@]}" --save "$tmpd/$run.safetensors" > "$tmpd/$run.out" 2>> "$train_log"
        echo "$run (again) exit $?: $(tail -n 1 "$tmpd/$run.out")" >> "$train_log"
      fi
    done
    python3 - "$tmpd"/{plain,again,nccl}.safetensors "$tmpd/nccl.out" <<'PY' 2>&1 | tee -a "$train_log" | tail -n 1 >> "$summary"
import array, json, struct, sys
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header, blob = json.loads(f.read(n)), f.read()
    out = {}
    for k, v in header.items():
        if k != "__metadata__" and v["dtype"] == "F32":
            a = array.array("f"); a.frombytes(blob[v["data_offsets"][0]:v["data_offsets"][1]]); out[k] = a
    return out
try:
    a, again, b = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
    last = open(sys.argv[4]).read().strip().splitlines()[-1]
    j = json.loads(last)
except Exception as e:  # a run that failed: its error is in train.log
    print(f"nccl: FAILED ({type(e).__name__}: {e}); see train.log"); sys.exit(0)
def differ(a, b):
    worst, n = 0.0, 0
    for k in a:
        scale = max(max(abs(x) for x in a[k]), 1e-30)
        worst = max(worst, max(abs(x - y) for x, y in zip(a[k], b[k])) / scale)
        n += sum(x != y for x, y in zip(a[k], b[k]))
    return f"{n} values differ, worst relative {worst:.3g}"
print(f"nccl: 1 rank under mpirun (ranks {j.get('ranks')}, {j.get('buckets')} buckets, all-reduce "
      f"{j.get('allreduce_seconds')} s, {j.get('allreduce_wait_seconds')} s waited) against one process, "
      f"{len(a)} tensors: {differ(a, b)}; two plain runs: {differ(a, again)}; {j.get('samples_per_s')} samples/s")
PY
    echo "==== MpiRun.* (CPU, 2 ranks) through $(command -v mpirun)" >> "$train_log"
    bounded 180 "$tests" --gtest_filter='MpiRun.*' > "$tmpd/mpirun.log" 2>&1
    cat "$tmpd/mpirun.log" >> "$train_log"
    note "nccl: MpiRun tests: $(grep -E '^\[  (PASSED|FAILED)  \] [0-9]+ test' "$tmpd/mpirun.log" | tr '\n' ' ')"
  fi
fi

# ---- ResNet-50 (224x224, 1000 classes, synthetic) beyond its memory (issue 12). B = 1.05x what
# --strategy auto needs at one micro-batch of 256 (train's own error line names each strategy's least):
# under B, in memory, only a micro-batch of 32 (one BatchNorm group) fits. Batch 256 as one micro-batch
# (auto; swap alone) under B, against batch 256 in memory with no budget and as micro-batches of 32 in
# memory under B; batch 256 under 1.05x the in-memory least at 32 (about 8x beyond), micro-batch and
# strategy left to auto; then auto under 1.5x and 2.5x auto's least (less to swap, less "beyond"). "x beyond" =
# 256 over the samples that fit in memory under that budget (linear in the micro-batch: from the in-memory
# least at 32 and 256). Samples/s and the per-micro-batch step (measured_step_s); best of --repeat for
# the first four.
if want beyond; then
  r50=(--model resnet50 --dataset synthetic --input 3x224x224 --classes 1000 --device cuda --seed 0 --lr 0.01
       --momentum 0.9 --threads "$jobs" --limit-test 32 --epochs 1 "${extra[@]}")
  least() {  # least M: train's error line naming each strategy's least budget at one micro-batch of M
    bounded 120 "$build/train" "${r50[@]}" --batch "$1" --micro-batch "$1" --limit-train "$1" --memory-budget 64KiB \
      --explain 2>&1 >/dev/null | tail -n 1
  }
  l32=$(least 32) l256=$(least 256)
  printf '==== beyond: least budgets\n%s\n%s\n' "$l32" "$l256" >> "$train_log"
  read -r in32 in256 auto256 < <(python3 - "$l32" "$l256" <<'PY' 2>> "$train_log"
import re, sys
U = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
def least(line):
    m = re.search(r"the least each needs: (.*?) \(", line)
    return {p.rsplit(" ", 2)[0]: float(p.rsplit(" ", 2)[1]) * U[p.rsplit(" ", 2)[2]] for p in m.group(1).split(", ")}
a, b = least(sys.argv[1]), least(sys.argv[2])
print(int(a["in memory"]), int(b["in memory"]), int(b["auto"]))
PY
  )
  if [[ -z "${auto256:-}" ]]; then
    note "beyond: FAILED: no least budgets from train (see train.log)"
  else
    budget=$(( auto256 * 105 / 100 ))
    bounded 120 "$build/train" "${r50[@]}" --batch 256 --micro-batch 256 --limit-train 256 --memory-budget "$budget" \
      --explain > "$tmpd/explain.txt" 2>&1
    { echo "==== beyond: --explain at micro-batch 256 under $budget bytes"
      grep -vE '^ +[0-9]+ +(forward|backward) ' "$tmpd/explain.txt"; } >> "$train_log"
    runs=("memory256 0 --micro-batch 256 --strategy none"
          "memory32 $budget --micro-batch 32 --strategy micro-batch"
          "auto256 $budget --micro-batch 256 --strategy auto"
          "swap256 $budget --micro-batch 256 --strategy swap"
          "auto $(( in32 * 105 / 100 )) --strategy auto"
          "auto256 $(( auto256 * 150 / 100 )) --micro-batch 256 --strategy auto"
          "auto256 $(( auto256 * 250 / 100 )) --micro-batch 256 --strategy auto")
    : > "$tmpd/beyond.txt"
    for ((r = 0; r < repeat; ++r)); do
      for ((i = 0; i < ${#runs[@]}; ++i)); do
        (( r > 0 && i >= 3 )) && continue  # once each: swap alone, 8x, and the larger budgets
        read -r name b flags <<< "${runs[i]}"
        budget_flag=()
        (( b > 0 )) && budget_flag=(--memory-budget "$b")
        # shellcheck disable=SC2086
        line=$(bounded 150 "$build/train" "${r50[@]}" --batch 256 $flags "${budget_flag[@]}" --limit-train 1024 \
                 2>> "$train_log" | tail -n 1)
        echo "beyond $name $b: $line" >> "$train_log"
        echo "$name $b $line" >> "$tmpd/beyond.txt"
      done
    done
    python3 - "$in32" "$in256" "$budget" "$tmpd/beyond.txt" "$(grep -o 'copies at [0-9.]* GB/s' "$tmpd/explain.txt" | head -1)" \
      <<'PY' 2>&1 | tee -a "$train_log" >> "$summary"
import json, sys
in32, in256, budget = (int(x) for x in sys.argv[1:4])
best = {}
for row in open(sys.argv[4]):
    name, b, line = (row.rstrip("\n").split(" ", 2) + [""])[:3]
    try:
        j = json.loads(line)
    except ValueError:
        j = None
    key = (name, int(b))
    if key not in best or (j and (not best[key] or j["samples_per_s"] > best[key]["samples_per_s"])):
        best[key] = j
G, per_sample = 2 ** 30, (in256 - in32) / 224  # in-memory bytes per sample; the rest is fixed
fits = lambda b: int((b - (in32 - 32 * per_sample)) // per_sample)
print(f"beyond: ResNet-50 224x224 batch 256; in memory m=32 needs {in32 / G:.2f} GiB, m=256 {in256 / G:.2f} GiB; "
      f"B = {budget / G:.2f} GiB (auto's least at m=256 + 5%), where {fits(budget)} samples fit in memory "
      f"({fits(budget) // 32 * 32} in whole BatchNorm groups); {sys.argv[5] or 'no copy rate in --explain'}")
base = best.get(("memory256", 0))
for (name, b), j in best.items():
    what = f"{name} under {b / G:.2f} GiB" if b else f"{name}, no budget"
    if b and name != "memory32":
        what += f" ({256 / max(fits(b), 1):.1f}x beyond)"
    if not j:
        print(f"beyond: {what}: FAILED (see train.log)"); continue
    rel = ""
    if base:
        rel = (f"; {j['samples_per_s'] / base['samples_per_s']:.3f} of in memory by samples/s, "
               f"{(base['measured_step_s'] / base['micro_batch']) / (j['measured_step_s'] / j['micro_batch']):.3f} by step")
    print(f"beyond: {what}: {j['samples_per_s']:.1f} samples/s, step {j['measured_step_s'] * 1e3:.1f} ms per "
          f"micro-batch of {j['micro_batch']} (predicted {j['predicted_step_s'] * 1e3:.1f}), {j['swapped']} swapped, "
          f"{j['recomputed']} recomputed, host pool {j['host_pool_bytes'] / G:.2f} GiB, used: {j['strategy_used']}{rel}")
PY
  fi
fi

if want cpu; then
  echo "==== other tests (ctest)" >> "$tests_log"
  bounded 240 ctest --test-dir "$build" -j "$jobs" -E "^Cuda|Cuda$|^OpParity\\.|^OpAccumulate\\.Cuda/" --output-on-failure \
    > "$tmpd/cpu.log" 2>&1
  cat "$tmpd/cpu.log" >> "$tests_log"
  note "other tests: $(grep -E 'tests passed|tests failed' "$tmpd/cpu.log" | tail -1)"
  grep -A20 'The following tests FAILED' "$tmpd/cpu.log" | tee -a "$summary"
fi

# ---- the same training on the GPU and on the CPU: test accuracy must agree within 0.5 points. Also on
# the GPU with TF32 allowed (its accuracy effect) and without CUDA graphs (what replaying them gains).
if want train; then
  echo "==== train" >> "$train_log"
  for m in "${model_list[@]}"; do
    for variant in "cuda" "cuda --tf32" "cuda --cuda-graphs off" "cpu"; do
      line=$(bounded 150 "$build/train" --model "$m" --device $variant --epochs "$epochs" --batch "$batch" \
               --lr 0.05 --momentum 0.9 --seed 0 --threads "$jobs" --data "$data" "${extra[@]}" 2>> "$train_log" | tail -1)
      echo "$m $variant $line" >> "$train_log"
      acc=$(json_field test_accuracy "$line") loss=$(json_field final_loss "$line") sps=$(json_field samples_per_s "$line")
      note "train $m --device $variant: test accuracy ${acc:-FAILED}, loss ${loss:-?}, ${sps:-?} samples/s"
    done
  done
  note "$(grep -m1 '^device:' "$train_log")"
fi

# ---- what replaying CUDA graphs gains: Crumb with and without, interleaved, best of --repeat each
if want graphs; then
  for m in "${model_list[@]}"; do
    best_on=0 best_off=0
    for ((r = 0; r < repeat; ++r)); do
      for g in on off; do
        line=$(bounded 60 "$build/train" --model "$m" --device cuda --cuda-graphs "$g" --epochs "$epochs" \
                 --batch "$batch" --seed 0 --data "$data" "${extra[@]}" 2>> "$train_log" | tail -1)
        sps=$(json_field samples_per_s "$line")
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
        --crumb "$build/train" --torch-tf32 "$tf32" -- $crumb_flag "${extra[@]}" > "$tmpd/compare.txt" 2>> "$out/compare.log"
      cat "$tmpd/compare.txt" >> "$out/compare.log"
      row=$(grep -E "^$m " "$tmpd/compare.txt")
      note "compare (crumb ${crumb_flag:-fp32}, torch tf32 $tf32): ${row:-FAILED, see compare.log}"
    done
  done
fi

# ---- a memory budget on the GPU: 8x the batch under a budget that forces micro-batches of about the
# in-memory run's size, against that in-memory run.
if want budget; then
  : > "$tmpd/budget.txt"
  for spec in "cnn 2048 16384 270MiB" "lenet5 4096 32768 100MiB"; do
    read -r m full big budget <<< "$spec"
    bounded 150 "$repo/tools/bench/microbatch.sh" --model "$m" --device cuda --full-batch "$full" --batch "$big" \
      --budget "$budget" --epochs 3 --repeat "$repeat" --threads "$jobs" --data "$data" --crumb "$build/train" \
      >> "$tmpd/budget.txt" 2>> "$train_log"
    note "budget $m: $(grep '"throughput_ratio"' "$tmpd/budget.txt" | tail -1)"
  done
  cat "$tmpd/budget.txt" >> "$train_log"
fi

# ---- swapping (copy stream, pinned host pool) and recomputation on the GPU: each strategy's least budget
# and step time at one BatchNorm group of ResNet-50 224x224 (tools/bench/strategy_bench.py).
if want swap; then
  bounded 240 python3 "$repo/tools/bench/strategy_bench.py" --train "$build/train" --models resnet50 --device cuda \
    --input 3x224x224 --repeat 2 > "$tmpd/swap.txt" 2>> "$train_log"
  note "swap: $(tail -n 1 "$tmpd/swap.txt")"
  cat "$tmpd/swap.txt" >> "$train_log"
fi

# ---- predicted against measured step time at five points of the recomputation frontier, resnet20 and
# ResNet-50 (tools/bench/frontier_predictions.py; issue 39 asks within 10%). --resnet50-input sizes ResNet-50.
if want predictions; then
  : > "$tmpd/predictions.txt"
  for spec in "120 --model resnet20 --input 3x32x32 --batch 256 --micro-batch 64 --bn-group 8" \
              "240 --model resnet50 --input $resnet50_input --classes 1000 --batch 64 --micro-batch 64"; do
    read -r limit flags <<< "$spec"
    read -r -a flags <<< "$flags"
    bounded "$limit" python3 "$repo/tools/bench/frontier_predictions.py" --train "$build/train" --repeat 2 \
      --limit-train 256 -- "${flags[@]}" --dataset synthetic --strategy recompute --device "$race_device" \
      --threads "$jobs" > "$tmpd/one.txt" 2>> "$train_log"
    cat "$tmpd/one.txt" >> "$tmpd/predictions.txt"
    note "predictions ${flags[1]} on $race_device: $(python3 -c '
import json, sys
j = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
e = [p["error"] for p in j[-1]["points"]] if j else []
print(f"errors {min(e):+.1%} to {max(e):+.1%} at {len(e)} points" if e else "FAILED (see train.log)")' "$tmpd/one.txt")"
  done
  cat "$tmpd/predictions.txt" >> "$train_log"
fi

finish 0
