// The CUDA dropout kernel. The conventions of every CUDA launcher (device pointers, the CPU twin's semantics, checked
// preconditions, asynchronous on `stream`, no allocation) are in docs/cuda.md.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dropout_mask.h"

namespace crumb::cuda {

// ---- dropout: the CPU's map (kernels/cpu/dropout.h) with the same mask; *key is in device memory. y may
// alias x.
void dropout(float* y, const float* x, int n, std::size_t per_sample, const RandomKey* key, uint64_t layer,
             uint32_t threshold, float scale, bool accumulate, cudaStream_t stream);

}  // namespace crumb::cuda
