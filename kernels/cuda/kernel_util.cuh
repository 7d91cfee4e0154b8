// Internal helpers shared by the CUDA kernel sources. Not part of the kernel interface.
#pragma once
#include <climits>
#include <cstddef>

#include "engine/base/error.h"
#include "kernels/half.h"

namespace crumb::cuda::detail {

// Threads per block of the one-thread-per-element kernels: a multiple of the warp size small enough
// for several resident blocks per SM.
inline constexpr int kBlock = 256;
inline constexpr int kWarp = 32;
inline constexpr unsigned kFullMask = 0xffffffffu;

// Blocks covering `threads` threads of kBlock each. The caller handles zero (an empty grid is a launch
// error).
inline unsigned blocks_for(std::size_t threads) {
  const std::size_t blocks = (threads + kBlock - 1) / kBlock;
  CRUMB_CHECK(blocks <= static_cast<std::size_t>(INT_MAX), "CUDA launch over ", threads,
              " threads exceeds the grid limit");
  return static_cast<unsigned>(blocks);
}

// Elements of an [n, c, hw] tensor, after checking the shape; `what` names the launcher.
inline std::size_t nchw_count(int n, int c, int hw, const char* what) {
  CRUMB_CHECK(n >= 0 && c >= 0 && hw >= 1, what, ": bad shape n=", n, " c=", c, " hw=", hw);
  return static_cast<std::size_t>(n) * c * hw;
}

// Flat index of this thread in a 1-D grid, in 64 bits: blockIdx.x * blockDim.x overflows 32 bits past
// 4G elements.
__device__ __forceinline__ std::size_t global_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// The write mode of a gradient output of storage type T (float, bf16, f16: kernels/half.h), the value
// computed in float32 and rounded once when stored. `accumulate` is uniform over the grid, so the branch
// costs no divergence; in write mode dst is not read, as it may hold garbage.
template <class T> __device__ __forceinline__ void put(T& dst, float value, bool accumulate) {
  if (accumulate) {
    dst = from_float<T>(to_float(dst) + value);
  } else {
    dst = from_float<T>(value);
  }
}

// Instantiates a launcher template for every storage type of the float kernels: X(float), X(bf16),
// X(f16). The 16-bit ones load as float, compute in float32 and store rounded to nearest even, so the
// float one is the same code as before there were others.
#define CRUMB_CUDA_FOR_FLOAT_TYPES(X) X(float) X(::crumb::bf16) X(::crumb::f16)

// Reductions across the 32 lanes of a warp; every lane gets the result. All lanes must take part.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

}  // namespace crumb::cuda::detail
