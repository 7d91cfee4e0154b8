// Dropout on the device: the CPU's map (kernels/cpu/dropout.cc) with the mask of kernels/dropout_mask.h,
// one thread per element, for float and the 16-bit storage types (computing in float32). The key is
// read from device memory, where the executor writes each micro-batch's before running it, so the
// kernel's arguments (and a recorded launch) stay the same.
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/dropout.h"

namespace crumb::cuda {
namespace {
using detail::blocks_for;
using detail::global_index;
using detail::kBlock;

template <class T>
__global__ void dropout_kernel(T* y, const T* x, std::size_t count, std::size_t per_sample, const RandomKey* key,
                               uint64_t layer, uint32_t threshold, float scale, bool accumulate) {
  const std::size_t idx = global_index();
  if (idx >= count) return;
  const std::size_t i = idx / per_sample, e = idx % per_sample;
  const uint64_t state = dropout_sample_state(key->batch, layer, key->first_sample + static_cast<int64_t>(i));
  detail::put(y[idx], dropout_keep(state, static_cast<int64_t>(e), threshold) ? to_float(x[idx]) * scale : 0.0f,
              accumulate);
}

}  // namespace

template <class T>
void dropout(T* y, const T* x, int n, std::size_t per_sample, const RandomKey* key, uint64_t layer, uint32_t threshold,
             float scale, bool accumulate, cudaStream_t stream) {
  CRUMB_CHECK(n >= 0 && per_sample >= 1 && key, "dropout: bad shape n=", n, " per_sample=", per_sample,
              " or no random key");
  const std::size_t count = static_cast<std::size_t>(n) * per_sample;
  if (count == 0) return;
  dropout_kernel<<<blocks_for(count), kBlock, 0, stream>>>(y, x, count, per_sample, key, layer, threshold, scale,
                                                           accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

#define CRUMB_INSTANTIATE(T)                                                                                     \
  template void dropout<T>(T*, const T*, int, std::size_t, const RandomKey*, uint64_t, uint32_t, float, bool, \
                           cudaStream_t);
CRUMB_CUDA_FOR_FLOAT_TYPES(CRUMB_INSTANTIATE)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cuda
