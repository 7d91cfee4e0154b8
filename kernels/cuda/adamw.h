// The CUDA AdamW step. The conventions of every CUDA launcher (device pointers, the CPU twin's semantics, checked
// preconditions, asynchronous on `stream`, no allocation) are in docs/cuda.md.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/adamw_scalars.h"

namespace crumb::cuda {

// One launch over the engine's flat parameter block, so it is the multi-tensor step; the semantics and
// layout of the CPU twin in kernels/cpu/adamw.h.
void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t count,
                const AdamWScalars& s, cudaStream_t stream);

}  // namespace crumb::cuda
