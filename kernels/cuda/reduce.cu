// Reductions over [n, c, hw] tensors: the per-channel bias gradient (over n and hw) and the global
// average pool (over hw), of float or 16-bit inputs, summed in float32. Both reduce in a fixed order, so
// results are deterministic. Also the count of
// non-finite values of a block (divergence detection), an integer total.
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/cuda/reduce.h"

namespace crumb::cuda {
namespace {
using detail::blocks_for;
using detail::global_index;
using detail::kBlock;
using detail::kWarp;
using detail::nchw_count;
using detail::put;
using detail::warp_sum;

// One block per channel has to stream n * hw elements (a whole batch of feature maps), so it uses the
// largest block for enough loads in flight; c blocks are launched.
constexpr int kChannelBlock = 1024;

// Sum over the block; the result is valid in thread 0. blockDim.x is a multiple of the warp size.
__device__ float block_sum(float v) {
  __shared__ float warp_sums[kChannelBlock / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / kWarp) ? warp_sums[lane] : 0.0f;
    v = warp_sum(v);
  }
  return v;
}

// Block b sums channel b of dy [n, c, hw]. Consecutive threads read consecutive pixels of one sample's
// plane, so loads coalesce when hw is large; for a linear layer (hw = 1) they are strided by c, which
// is cheap at the sizes of a classifier head.
template <class T>
__global__ void bias_backward_nchw_kernel(float* db, const T* dy, int n, int c, int hw, bool accumulate) {
  const int channel = blockIdx.x;
  const std::size_t per_channel = static_cast<std::size_t>(n) * hw;
  float sum = 0.0f;
  for (std::size_t e = threadIdx.x; e < per_channel; e += blockDim.x) {
    const std::size_t sample = e / hw, pixel = e - sample * hw;
    sum += to_float(dy[(sample * c + channel) * hw + pixel]);
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) put(db[channel], sum, accumulate);
}

// One warp per row of x [rows, hw]: hw is a final feature map (7x7, 8x8), too short for a block.
template <class T>
__global__ void global_avg_pool_forward_kernel(T* y, const T* x, std::size_t rows, int hw, float inv_hw) {
  const std::size_t row = global_index() / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // uniform across the warp, so the shuffles below see all lanes
  const T* xr = x + row * hw;
  float sum = 0.0f;
  for (int j = lane; j < hw; j += kWarp) sum += to_float(xr[j]);
  sum = warp_sum(sum);
  if (lane == 0) y[row] = from_float<T>(sum * inv_hw);
}

// Grid-stride: each block counts its elements and adds its total once (the sum is exact in any order).
__global__ void count_nonfinite_kernel(unsigned long long* count, const float* x, std::size_t n) {
  float bad = 0.0f;
  for (std::size_t i = global_index(); i < n; i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    bad += isfinite(x[i]) ? 0.0f : 1.0f;
  bad = block_sum(bad);
  if (threadIdx.x == 0 && bad > 0.0f) atomicAdd(count, static_cast<unsigned long long>(bad));
}

}  // namespace

void count_nonfinite(unsigned long long* count, const float* x, std::size_t n, cudaStream_t stream) {
  CRUMB_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof *count, stream));
  if (n == 0) return;
  // A few blocks per SM are enough to stream the block at memory speed.
  const unsigned blocks = std::min<unsigned>(blocks_for(n), 1024);
  count_nonfinite_kernel<<<blocks, kChannelBlock, 0, stream>>>(count, x, n);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void bias_backward_nchw(float* db, const T* dy, int n, int c, int hw, bool accumulate, cudaStream_t stream) {
  nchw_count(n, c, hw, "bias_backward_nchw");
  if (c == 0) return;
  // n == 0 still launches: the gradient of an empty batch is zero, which write mode must store.
  bias_backward_nchw_kernel<<<c, kChannelBlock, 0, stream>>>(db, dy, n, c, hw, accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T> void global_avg_pool_forward(T* y, const T* x, int n, int c, int hw, cudaStream_t stream) {
  nchw_count(n, c, hw, "global_avg_pool_forward");
  const std::size_t rows = static_cast<std::size_t>(n) * c;
  if (rows == 0) return;
  const float inv_hw = 1.0f / static_cast<float>(hw);
  global_avg_pool_forward_kernel<<<blocks_for(rows * kWarp), kBlock, 0, stream>>>(y, x, rows, hw, inv_hw);
  CRUMB_CUDA_CHECK_LAUNCH();
}

#define CRUMB_INSTANTIATE(T)                                                                 \
  template void bias_backward_nchw<T>(float*, const T*, int, int, int, bool, cudaStream_t); \
  template void global_avg_pool_forward<T>(T*, const T*, int, int, int, cudaStream_t);
CRUMB_CUDA_FOR_FLOAT_TYPES(CRUMB_INSTANTIATE)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cuda
