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

}  // namespace

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
