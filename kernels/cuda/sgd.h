// The CUDA SGD step. The conventions of every CUDA launcher (device pointers, the CPU twin's semantics, checked
// preconditions, asynchronous on `stream`, no allocation) are in docs/cuda.md.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace crumb::cuda {

// One launch over the engine's flat parameter block, so it is the multi-tensor step; the semantics and
// layout of the CPU twin in kernels/cpu/sgd.h.
void sgd_momentum_step(float* params, const float* grads, float* momentum_buf, std::size_t count, float lr,
                       float momentum, float weight_decay, bool nesterov, bool first_step, cudaStream_t stream);

}  // namespace crumb::cuda
