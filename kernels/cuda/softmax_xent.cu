// Softmax cross-entropy: the forward fuses softmax, loss and accuracy in one kernel (one warp per
// row: rows are class scores, tens to a few thousand wide); the backward is one elementwise kernel. Both
// read and write float or 16-bit values and compute in float32 (the loss in double).
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/softmax_xent.h"

namespace crumb::cuda {
namespace {
using detail::blocks_for;
using detail::global_index;
using detail::kBlock;
using detail::kFullMask;
using detail::kWarp;
using detail::put;
using detail::warp_max;
using detail::warp_sum;

std::size_t rows_count(int n, int k, const char* what) {
  CRUMB_CHECK(n >= 0 && k >= 1, what, ": bad shape n=", n, " k=", k);
  return static_cast<std::size_t>(n) * k;
}

// Whether column j with value q comes before column best_j with value best in argmax order: larger
// first, NaN largest of all, and the lower column first among equals.
__device__ bool beats(float q, int j, float best, int best_j) {
  const bool q_nan = isnan(q), best_nan = isnan(best);
  if (q_nan != best_nan) return q_nan;
  return q_nan || q == best ? j < best_j : q > best;
}

template <class T>
__global__ void softmax_xent_forward_kernel(float* probs, const T* logits, const int32_t* labels, int n, int k,
                                            double* loss_sum, unsigned long long* correct) {
  const std::size_t row = global_index() / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= static_cast<std::size_t>(n)) return;  // uniform across the warp
  const T* z = logits + row * k;
  float* p = probs + row * k;

  // Shifting by the row max keeps every exp() in (0, 1], so large logits cannot overflow.
  float zmax = -INFINITY;
  for (int j = lane; j < k; j += kWarp) zmax = fmaxf(zmax, to_float(z[j]));
  zmax = warp_max(zmax);
  float sum = 0.0f;
  for (int j = lane; j < k; j += kWarp) sum += expf(to_float(z[j]) - zmax);
  sum = warp_sum(sum);

  // Accuracy is judged on the normalised probs, as the CPU's count_correct does: rounding can tie two
  // probs whose logits differ, and then the first one must win. NaN counts as the largest value, as in
  // the CPU's argmax. Each lane scans its columns in increasing order (so it keeps its first maximum);
  // across lanes, ties go to the lower column. The exponentials are computed again rather than stored
  // and reloaded (the same bits).
  const float inv = static_cast<float>(1.0 / sum);
  float best = -1.0f;  // probs are >= 0 or NaN, so any column beats it
  int best_j = k;
  for (int j = lane; j < k; j += kWarp) {
    const float q = expf(to_float(z[j]) - zmax) * inv;
    p[j] = q;
    if (beats(q, j, best, best_j)) best = q, best_j = j;
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(kFullMask, best, offset);
    const int other_j = __shfl_xor_sync(kFullMask, best_j, offset);
    if (beats(other, other_j, best, best_j)) best = other, best_j = other_j;
  }

  if (lane == 0) {
    const int label = labels[row];
    // -log p[label] = log(sum) - (z[label] - zmax), exact even where p[label] underflows to 0.
    atomicAdd(loss_sum, log(static_cast<double>(sum)) - (static_cast<double>(to_float(z[label])) - zmax));
    if (best_j == label) atomicAdd(correct, 1ull);
  }
}

template <class T>
__global__ void softmax_xent_backward_kernel(T* dlogits, const float* probs, const int32_t* labels, std::size_t count,
                                             int k, float scale, bool accumulate) {
  const std::size_t i = global_index();
  if (i >= count) return;
  const std::size_t row = i / k;
  const int j = static_cast<int>(i - row * k);
  put(dlogits[i], scale * (probs[i] - (j == labels[row] ? 1.0f : 0.0f)), accumulate);
}

}  // namespace

template <class T>
void softmax_xent_forward(float* probs, const T* logits, const int32_t* labels, int n, int k, double* loss_sum_dev,
                          unsigned long long* correct_dev, cudaStream_t stream) {
  if (rows_count(n, k, "softmax_xent_forward") == 0) return;
  const std::size_t threads = static_cast<std::size_t>(n) * kWarp;
  softmax_xent_forward_kernel<<<blocks_for(threads), kBlock, 0, stream>>>(probs, logits, labels, n, k, loss_sum_dev,
                                                                          correct_dev);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void softmax_xent_backward(T* dlogits, const float* probs, const int32_t* labels, int n, int k, float scale,
                           bool accumulate, cudaStream_t stream) {
  const std::size_t count = rows_count(n, k, "softmax_xent_backward");
  if (count == 0) return;
  softmax_xent_backward_kernel<<<blocks_for(count), kBlock, 0, stream>>>(dlogits, probs, labels, count, k, scale,
                                                                         accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

#define CRUMB_INSTANTIATE(T)                                                                                 \
  template void softmax_xent_forward<T>(float*, const T*, const int32_t*, int, int, double*, unsigned long long*, \
                                        cudaStream_t);                                                            \
  template void softmax_xent_backward<T>(T*, const float*, const int32_t*, int, int, float, bool, cudaStream_t);
CRUMB_CUDA_FOR_FLOAT_TYPES(CRUMB_INSTANTIATE)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cuda
