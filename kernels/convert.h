// Element type conversion between float32 and the 16-bit storage types (kernels/half.h): the CPU's
// (crumb::cpu, kernels/cpu/convert.cc) and its CUDA twin (crumb::cuda, kernels/cuda/convert.cu). It
// feeds 16-bit values to float32 kernels and stores their results (engine/device/widen.h), writes the
// 16-bit copies of float32 parameters, and casts float32 inputs in mixed-precision graphs.
#pragma once
#include <cstddef>

#include "engine/base/tensor.h"
#include "kernels/host_device.h"

namespace crumb::cpu {

// dst[i] = src[i] converted, for i < count; dst and src each F32, BF16 or F16 (the same dtype copies).
// With accumulate, dst[i] = dst[i] + src[i] computed in float32, then stored.
void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count, bool accumulate = false);

}  // namespace crumb::cpu

namespace crumb::cuda {

void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count, bool accumulate,
             cudaStream_t stream);

}  // namespace crumb::cuda
