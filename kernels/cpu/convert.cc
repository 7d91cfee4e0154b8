#include "kernels/convert.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "engine/base/error.h"
#include "kernels/cpu/convert16.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/half.h"

namespace crumb::cpu {
namespace {

template <class D, class S> void convert_as(void* dst, const void* src, std::size_t count, bool accumulate) {
  D* d = static_cast<D*>(dst);
  const S* s = static_cast<const S*>(src);
  const auto end = static_cast<std::ptrdiff_t>(count);
  if (accumulate) {
#pragma omp parallel for schedule(static) if (end > detail::kParallelGrain)
    for (std::ptrdiff_t i = 0; i < end; ++i) d[i] = from_float<D>(to_float(d[i]) + to_float(s[i]));
  } else if constexpr (std::is_same_v<D, float> != std::is_same_v<S, float>) {
    // Between float32 and a 16-bit type: in runs, SIMD where the CPU has it (kernels/cpu/convert16.h).
    constexpr std::ptrdiff_t kRun = 4096;
    const std::ptrdiff_t runs = (end + kRun - 1) / kRun;
#pragma omp parallel for schedule(static) if (end > detail::kParallelGrain)
    for (std::ptrdiff_t r = 0; r < runs; ++r) {
      const std::ptrdiff_t at = r * kRun, n = std::min(kRun, end - at);
      if constexpr (std::is_same_v<D, float>) {
        to_float_run(d + at, s + at, static_cast<std::size_t>(n));
      } else {
        from_float_run(d + at, s + at, static_cast<std::size_t>(n));
      }
    }
  } else {
#pragma omp parallel for schedule(static) if (end > detail::kParallelGrain)
    for (std::ptrdiff_t i = 0; i < end; ++i) d[i] = from_float<D>(to_float(s[i]));
  }
}

template <class D> void convert_to(void* dst, const void* src, DType src_dtype, std::size_t count, bool accumulate) {
  switch (src_dtype) {
    case DType::F32: return convert_as<D, float>(dst, src, count, accumulate);
    case DType::BF16: return convert_as<D, bf16>(dst, src, count, accumulate);
    case DType::F16: return convert_as<D, f16>(dst, src, count, accumulate);
    default: CRUMB_FAIL("convert: cannot convert from ", dtype_name(src_dtype));
  }
}

// Each block's [rows][cols] matrix transposed: the destination is written in order, a source row of
// `cols` apart at a time, with no division per element.
template <class D, class S> void relayout_as(void* dst, const void* src, ImageShape sh, Layout to, bool accumulate) {
  D* d = static_cast<D*>(dst);
  const S* s = static_cast<const S*>(src);
  // In the destination's order: NHWC rows are positions (of c channels), NCHW rows channels (of s positions).
  const int64_t rows = to == Layout::NHWC ? sh.s : sh.c, cols = to == Layout::NHWC ? sh.c : sh.s;
  const auto lines = static_cast<std::ptrdiff_t>(sh.n * rows);
#pragma omp parallel for schedule(static) if (sh.count() > detail::kParallelGrain)
  for (std::ptrdiff_t line = 0; line < lines; ++line) {
    const int64_t block = line / rows * rows * cols, r = line % rows;
    D* out = d + block + r * cols;
    const S* in = s + block + r;
    for (int64_t k = 0; k < cols; ++k) relayout_element(out[k], in[k * rows], accumulate);
  }
}

}  // namespace

void relayout(void* dst, DType dst_dtype, const void* src, DType src_dtype, ImageShape sh, Layout to,
              bool accumulate) {
  dispatch_relayout(dst_dtype, src_dtype, accumulate, [&](auto* d, auto* s) {
    using D = std::remove_pointer_t<decltype(d)>;
    using S = std::remove_const_t<std::remove_pointer_t<decltype(s)>>;
    relayout_as<D, S>(dst, src, sh, to, accumulate);
  });
}

void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count, bool accumulate) {
  switch (dst_dtype) {
    case DType::F32: return convert_to<float>(dst, src, src_dtype, count, accumulate);
    case DType::BF16: return convert_to<bf16>(dst, src, src_dtype, count, accumulate);
    case DType::F16: return convert_to<f16>(dst, src, src_dtype, count, accumulate);
    default: CRUMB_FAIL("convert: cannot convert to ", dtype_name(dst_dtype));
  }
}

}  // namespace crumb::cpu
