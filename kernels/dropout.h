// The dropout kernel: the CPU's (crumb::cpu, kernels/cpu/dropout.cc) and their CUDA twins (crumb::cuda,
// kernels/cuda/dropout.cu). The conventions of every CPU kernel (raw pointers, explicit shapes, no allocation, write
// modes, float and double) are in docs/architecture.md, Kernels; those of every CUDA launcher (device pointers, the CPU
// twin's semantics, checked preconditions, asynchronous on `stream`, no allocation) in docs/cuda.md.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dropout_mask.h"
#include "kernels/half.h"
#include "kernels/host_device.h"

namespace crumb::cpu {

// ---- dropout over n samples of per_sample elements: y (=|+=) x * scale where kept, else 0, with the
// mask of kernels/dropout_mask.h for samples key.first_sample + i of the batch. The forward (x = input,
// write mode) and the backward (x = dy, the parameters' write mode) are the same map. y may alias x.
template <class T>
void dropout(T* y, const T* x, int n, std::size_t per_sample, const RandomKey& key, uint64_t layer,
             uint32_t threshold, Arith<T> scale, bool accumulate);

}  // namespace crumb::cpu

namespace crumb::cuda {

// ---- dropout: the CPU's map (above) with the same mask; *key is in device memory. y may
// alias x. T is float, bf16 or f16 (kernels/half.h; computed in float32).
template <class T>
void dropout(T* y, const T* x, int n, std::size_t per_sample, const RandomKey* key, uint64_t layer, uint32_t threshold,
             float scale, bool accumulate, cudaStream_t stream);

}  // namespace crumb::cuda
