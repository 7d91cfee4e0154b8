// One-thread-per-element kernels: activations, sums, copies and the per-channel broadcasts (bias add,
// global-average-pool backward). All are memory bound; each thread touches index i of every array
// only, which is what makes the documented in-place aliasing safe.
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/elementwise.h"

namespace crumb::cuda {
namespace {
using detail::blocks_for;
using detail::global_index;
using detail::kBlock;
using detail::nchw_count;
using detail::put;

// Not __restrict__: the launchers document y/x and dx/dy aliasing.
__global__ void relu_forward_kernel(float* y, const float* x, std::size_t count) {
  const std::size_t i = global_index();
  if (i < count) y[i] = x[i] <= 0.0f ? 0.0f : x[i];  // NaN propagates, as in the CPU kernel and PyTorch
}

__global__ void relu_backward_kernel(float* dx, const float* dy, const float* y, std::size_t count, bool accumulate) {
  const std::size_t i = global_index();
  if (i < count) put(dx[i], y[i] > 0.0f ? dy[i] : 0.0f, accumulate);
}

__global__ void add_forward_kernel(float* y, const float* a, const float* b, std::size_t count) {
  const std::size_t i = global_index();
  if (i < count) y[i] = a[i] + b[i];
}

__global__ void copy_or_accumulate_kernel(float* y, const float* x, std::size_t count, bool accumulate) {
  const std::size_t i = global_index();
  if (i < count) put(y[i], x[i], accumulate);
}

// y [rows = n * c, hw]: element i belongs to channel (i / hw) % c.
__global__ void bias_add_nchw_kernel(float* y, const float* b, std::size_t count, int c, int hw) {
  const std::size_t i = global_index();
  if (i < count) y[i] += b[(i / hw) % c];
}

// dx [rows, hw], dy [rows]: every element of a row gets the row's share dy / hw.
__global__ void global_avg_pool_backward_kernel(float* dx, const float* dy, std::size_t count, int hw, float inv_hw,
                                                bool accumulate) {
  const std::size_t i = global_index();
  if (i < count) put(dx[i], dy[i / hw] * inv_hw, accumulate);
}

}  // namespace

void relu_forward(float* y, const float* x, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  relu_forward_kernel<<<blocks_for(count), kBlock, 0, stream>>>(y, x, count);
  CRUMB_CUDA_CHECK_LAUNCH();
}

void relu_backward(float* dx, const float* dy, const float* y, std::size_t count, bool accumulate,
                   cudaStream_t stream) {
  if (count == 0) return;
  relu_backward_kernel<<<blocks_for(count), kBlock, 0, stream>>>(dx, dy, y, count, accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

void add_forward(float* y, const float* a, const float* b, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  add_forward_kernel<<<blocks_for(count), kBlock, 0, stream>>>(y, a, b, count);
  CRUMB_CUDA_CHECK_LAUNCH();
}

void copy_or_accumulate(float* y, const float* x, std::size_t count, bool accumulate, cudaStream_t stream) {
  if (count == 0) return;
  copy_or_accumulate_kernel<<<blocks_for(count), kBlock, 0, stream>>>(y, x, count, accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

void bias_add_nchw(float* y, const float* b, int n, int c, int hw, cudaStream_t stream) {
  const std::size_t count = nchw_count(n, c, hw, "bias_add_nchw");
  if (count == 0) return;
  bias_add_nchw_kernel<<<blocks_for(count), kBlock, 0, stream>>>(y, b, count, c, hw);
  CRUMB_CUDA_CHECK_LAUNCH();
}

void global_avg_pool_backward(float* dx, const float* dy, int n, int c, int hw, bool accumulate, cudaStream_t stream) {
  const std::size_t count = nchw_count(n, c, hw, "global_avg_pool_backward");
  if (count == 0) return;
  // 1/hw rounded once, then multiplied, as the CPU kernel does.
  const float inv_hw = 1.0f / static_cast<float>(hw);
  global_avg_pool_backward_kernel<<<blocks_for(count), kBlock, 0, stream>>>(dx, dy, count, hw, inv_hw, accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

}  // namespace crumb::cuda
