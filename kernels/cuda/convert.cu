// Element type conversion, one thread per element (memory bound); the CPU twin's rounding, from the
// shared definitions of kernels/half.h.
#include "kernels/convert.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/half.h"

namespace crumb::cuda {
namespace {
using detail::blocks_for;
using detail::global_index;
using detail::kBlock;

template <class D, class S>
__global__ void convert_kernel(D* dst, const S* src, std::size_t count, bool accumulate) {
  const std::size_t i = global_index();
  if (i >= count) return;
  const float v = to_float(src[i]);
  dst[i] = from_float<D>(accumulate ? to_float(dst[i]) + v : v);
}

template <class D, class S>
void launch(void* dst, const void* src, std::size_t count, bool accumulate, cudaStream_t stream) {
  convert_kernel<<<blocks_for(count), kBlock, 0, stream>>>(static_cast<D*>(dst), static_cast<const S*>(src), count,
                                                           accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class D>
void convert_to(void* dst, const void* src, DType src_dtype, std::size_t count, bool accumulate, cudaStream_t stream) {
  switch (src_dtype) {
    case DType::F32: return launch<D, float>(dst, src, count, accumulate, stream);
    case DType::BF16: return launch<D, bf16>(dst, src, count, accumulate, stream);
    case DType::F16: return launch<D, f16>(dst, src, count, accumulate, stream);
    default: CRUMB_FAIL("convert: cannot convert from ", dtype_name(src_dtype));
  }
}

template <class D, class S>
__global__ void relayout_kernel(D* dst, const S* src, ImageShape sh, Layout to, bool accumulate) {
  const std::size_t i = global_index();
  if (i >= static_cast<std::size_t>(sh.count())) return;
  relayout_element(dst[i], src[relayout_source(static_cast<int64_t>(i), sh.c, sh.s, to)], accumulate);
}

template <class D, class S>
void launch_relayout(void* dst, const void* src, ImageShape sh, Layout to, bool accumulate, cudaStream_t stream) {
  relayout_kernel<<<blocks_for(sh.count()), kBlock, 0, stream>>>(static_cast<D*>(dst), static_cast<const S*>(src),
                                                                  sh, to, accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

}  // namespace

// One thread per element, reading the other layout with a stride: simple, and uncoalesced on one side.
// The conversions sit at region boundaries only (engine/plan/layout.h); a tiled transpose through shared
// memory is the step up if a GPU profile shows them.
void relayout(void* dst, DType dst_dtype, const void* src, DType src_dtype, ImageShape sh, Layout to,
              bool accumulate, cudaStream_t stream) {
  if (sh.count() == 0) return;
  dispatch_relayout(dst_dtype, src_dtype, accumulate, [&](auto* d, auto* s) {
    using D = std::remove_pointer_t<decltype(d)>;
    using S = std::remove_const_t<std::remove_pointer_t<decltype(s)>>;
    launch_relayout<D, S>(dst, src, sh, to, accumulate, stream);
  });
}

void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count, bool accumulate,
             cudaStream_t stream) {
  if (count == 0) return;
  switch (dst_dtype) {
    case DType::F32: return convert_to<float>(dst, src, src_dtype, count, accumulate, stream);
    case DType::BF16: return convert_to<bf16>(dst, src, src_dtype, count, accumulate, stream);
    case DType::F16: return convert_to<f16>(dst, src, src_dtype, count, accumulate, stream);
    default: CRUMB_FAIL("convert: cannot convert to ", dtype_name(dst_dtype));
  }
}

}  // namespace crumb::cuda
