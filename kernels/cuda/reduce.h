// CUDA reductions (defined in reduce.cu). The conventions of every CUDA launcher (device pointers, the CPU twin's
// semantics, checked preconditions, asynchronous on `stream`, no allocation) are in docs/cuda.md.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/half.h"

namespace crumb::cuda {

// ---- per-channel reductions over [n, c, hw] tensors (hw = 1 for a linear layer's [n, c])
// Both are defined for T = float, bf16 and f16 (kernels/half.h), summing in float32.
// db [c] (=|+=) sum over n and hw of dy [n, c, hw]. One block reduces one channel in a fixed order, so
// the result is deterministic (no atomics). db is float32 whatever dy is: a parameter gradient.
template <class T>
void bias_backward_nchw(float* db, const T* dy, int n, int c, int hw, bool accumulate, cudaStream_t stream);
// The global average pool: x [n, c, hw] -> y [n, c]
template <class T> void global_avg_pool_forward(T* y, const T* x, int n, int c, int hw, cudaStream_t stream);

// *count (device memory) = elements of x that are NaN or infinite (divergence detection).
void count_nonfinite(unsigned long long* count, const float* x, std::size_t n, cudaStream_t stream);

}  // namespace crumb::cuda
