// Element type conversion between float32 and the 16-bit storage types (kernels/half.h): the CPU's
// (crumb::cpu, kernels/cpu/convert.cc) and its CUDA twin (crumb::cuda, kernels/cuda/convert.cu). It
// feeds 16-bit values to float32 kernels and stores their results (engine/device/widen.h), writes the
// 16-bit copies of float32 parameters, and casts float32 inputs in mixed-precision graphs. relayout
// also moves image tensors between NCHW and NHWC (engine/plan/layout.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include <type_traits>

#include "engine/base/error.h"
#include "engine/base/tensor.h"
#include "kernels/half.h"
#include "kernels/host_device.h"

namespace crumb {

// An image tensor as n blocks of c channels by s positions: a batch of [C, H, W] (s = H * W), or a
// filter [K, C, R, S] (n = K, s = R * S). Its two layouts hold each block as [c][s] (NCHW) or [s][c] (NHWC).
struct ImageShape {
  int64_t n = 0, c = 0, s = 0;
  CRUMB_HOST_DEVICE int64_t count() const { return n * c * s; }
};

// Where element i of a tensor in layout `to` is in the same tensor in the other layout.
CRUMB_HOST_DEVICE int64_t relayout_source(int64_t i, int64_t c, int64_t s, Layout to) {
  const int64_t block = c * s, in_block = i % block, base = i - in_block;
  if (to == Layout::NHWC) return base + (in_block % c) * s + in_block / c;
  return base + (in_block % s) * c + in_block / s;
}

// One element of relayout: a non-float dtype's bits moved, F64 written or added in float64, the float
// dtypes converted (and added) in float32.
template <class D, class S> CRUMB_HOST_DEVICE void relayout_element(D& d, const S& s, bool accumulate) {
  if constexpr (std::is_integral_v<D>) {
    d = s;
  } else if constexpr (std::is_same_v<D, double>) {
    d = accumulate ? d + s : s;
  } else {
    d = from_float<D>(accumulate ? to_float(d) + to_float(s) : to_float(s));
  }
}

// Calls f(D*{}, S*{}) with the element types relayout moves between for these dtypes (both devices'
// launchers dispatch through it).
template <class F> void dispatch_relayout(DType dst, DType src, bool accumulate, F&& f) {
  auto from = [&](auto* d) {
    switch (src) {
      case DType::F32: return f(d, static_cast<const float*>(nullptr));
      case DType::BF16: return f(d, static_cast<const bf16*>(nullptr));
      case DType::F16: return f(d, static_cast<const f16*>(nullptr));
      default: CRUMB_FAIL("relayout: cannot convert from ", dtype_name(src), " to ", dtype_name(dst));
    }
  };
  if (dst == src && !is_float(dst)) {
    CRUMB_CHECK(!accumulate, "relayout: cannot add ", dtype_name(dst), " values");
    switch (dtype_size(dst)) {
      case 1: return f(static_cast<uint8_t*>(nullptr), static_cast<const uint8_t*>(nullptr));
      case 4: return f(static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr));
      default: return f(static_cast<uint64_t*>(nullptr), static_cast<const uint64_t*>(nullptr));
    }
  }
  if (dst == DType::F64 || src == DType::F64) {
    CRUMB_CHECK(dst == src, "relayout: cannot convert between ", dtype_name(src), " and ", dtype_name(dst));
    return f(static_cast<double*>(nullptr), static_cast<const double*>(nullptr));
  }
  switch (dst) {
    case DType::F32: return from(static_cast<float*>(nullptr));
    case DType::BF16: return from(static_cast<bf16*>(nullptr));
    case DType::F16: return from(static_cast<f16*>(nullptr));
    default: CRUMB_FAIL("relayout: cannot convert to ", dtype_name(dst));
  }
}

}  // namespace crumb

namespace crumb::cpu {

// dst[i] = src[i] converted, for i < count; dst and src each F32, BF16 or F16 (the same dtype copies).
// With accumulate, dst[i] = dst[i] + src[i] computed in float32, then stored.
void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count, bool accumulate = false);
// dst (in layout `to`) = src (in the other layout), element by element as convert() does. Besides the
// conversions convert() makes, any dtype moves unchanged (the max pool's U8 argmax), and F64 adds to F64.
void relayout(void* dst, DType dst_dtype, const void* src, DType src_dtype, ImageShape shape, Layout to,
              bool accumulate = false);

}  // namespace crumb::cpu

namespace crumb::cuda {

void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count, bool accumulate,
             cudaStream_t stream);
void relayout(void* dst, DType dst_dtype, const void* src, DType src_dtype, ImageShape shape, Layout to,
              bool accumulate, cudaStream_t stream);

}  // namespace crumb::cuda
