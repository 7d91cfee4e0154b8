#!/usr/bin/env bash
# Everything the GPU machine is for, in one call: find cuDNN, build with CUDA, run the whole test suite,
# run the CUDA tests under compute-sanitizer, then train lenet5 and cnn with Crumb and PyTorch side by
# side on the GPU (tools/bench/compare.sh --device cuda). Logs go to $OUT (or ./gpu-out) for the device
# tool to bring back; the comparison table is printed last.
#
# usage: tools/bench/gpu.sh [--batch 256] [--repeat 3] [--epochs 1] [--skip-sanitizer]
# Needs gpu-carry/ (tools/bench/gpu_carry.sh) when the machine lacks Eigen, GoogleTest, zlib or the data.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
batch=256 repeat=3 epochs=1 sanitizer=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --batch) batch=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --skip-sanitizer) sanitizer=0; shift ;;
    *) sed -n '7p' "$0" >&2; exit 2 ;;
  esac
done
out=${OUT:-$repo/gpu-out}
mkdir -p "$out"
carry="$repo/gpu-carry"
build="$repo/build-gpu"
jobs=$(nproc)

{ nvidia-smi; nvcc --version; cmake --version | head -1; } 2>&1 | tee "$out/machine.txt"

# cuDNN: the CUDA toolkit's, the system's, or the one PyTorch's wheels bring (libcudnn.so.9 only: a
# link named libcudnn.so is made for find_library).
cudnn_args=()
py_cudnn=$(python3 -c 'import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))' 2>/dev/null || true)
for dir in ${CUDNN_ROOT:-} /usr/local/cuda /usr /usr/local/cuda/targets/x86_64-linux $py_cudnn; do
  [[ -n "$dir" && -d "$dir" ]] || continue
  header=$(find "$dir/include" "$dir/include/x86_64-linux-gnu" -maxdepth 1 -name cudnn.h 2>/dev/null | head -1 || true)
  lib=$(find "$dir/lib" "$dir/lib64" "$dir/lib/x86_64-linux-gnu" -maxdepth 1 -name 'libcudnn.so*' 2>/dev/null | sort | head -1 || true)
  if [[ -n "$header" && -n "$lib" ]]; then
    mkdir -p "$build/cudnn-link"
    ln -sf "$lib" "$build/cudnn-link/libcudnn.so"
    cudnn_args=(-DCUDNN_INCLUDE_DIR="$(dirname "$header")" -DCUDNN_LIBRARY="$build/cudnn-link/libcudnn.so")
    export LD_LIBRARY_PATH="$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "cuDNN: $header, $lib" | tee -a "$out/machine.txt"
    break
  fi
done
[[ ${#cudnn_args[@]} -gt 0 ]] || echo "cuDNN: not found (convolutions will have no CUDA implementation)" | tee -a "$out/machine.txt"

# Dependencies the bare machine may lack come from gpu-carry/.
dep_args=()
if [[ -d "$carry" ]]; then
  dep_args=(-DEigen3_DIR="$carry/eigen/share/eigen3/cmake" -DGTEST_ROOT="$carry/gtest"
            -DZLIB_ROOT="$carry/zlib")
fi
data="$carry/data"
[[ -d "$data" ]] || data=/usr/share/datasets/fashion-mnist

cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCRUMB_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 "${cudnn_args[@]}" "${dep_args[@]}" 2>&1 | tee "$out/configure.txt"
cmake --build "$build" -j "$jobs" 2>&1 | tail -n 30 | tee "$out/build.txt"

# The whole suite (CPU and CUDA tests), then the device's tests under compute-sanitizer.
# The GPU tests run one at a time: one of them measures the device's free memory.
(cd "$build" && ctest -j "$jobs" -E '^Cuda' --output-on-failure) 2>&1 | tee "$out/ctest.txt" | tail -n 20 || true
(cd "$build" && ctest -j 1 -R '^Cuda' --output-on-failure) 2>&1 | tee "$out/ctest_cuda.txt" | tail -n 40 || true
if [[ $sanitizer == 1 ]]; then
  compute-sanitizer --tool memcheck --error-exitcode 1 "$build/crumb_tests" --gtest_filter='CudaEngine.*:CudaKernels.*' \
    > "$out/memcheck.txt" 2>&1 && echo "memcheck: clean" || echo "memcheck: FAILED (see memcheck.txt)"
  tail -n 5 "$out/memcheck.txt"
fi

# Crumb against the machine's PyTorch, same settings, on the GPU.
export CRUMB_BENCH_PYTHON=${CRUMB_BENCH_PYTHON:-python3}
for model in lenet5 cnn; do
  "$repo/tools/bench/compare.sh" --model "$model" --device cuda --batch "$batch" --epochs "$epochs" \
    --repeat "$repeat" --data "$data" --crumb "$build/train" 2> "$out/compare_$model.log" | tee "$out/compare_$model.txt"
done
