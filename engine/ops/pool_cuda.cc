// Pooling's CUDA rows: custom kernels (kernels/cuda/pool.cu, reduce.cu) matching the CPU's tie and NaN
// rules, on the compute stream.
#include "engine/cuda/cuda_backend.h"
#include "engine/base/registry.h"
#include "engine/ops/pool.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/pool.h"
#include "kernels/cuda/reduce.h"

namespace crumb {
namespace {

cpu::Pool2dShape shape(const StepArgs& a) { return ops::at_batch<cpu::Pool2dShape>(*a.node, a.n); }

void max_fwd(const StepArgs& a) {
  cuda::max_pool2d_forward(a.out<float>(0), a.out<uint8_t>(1), a.in<float>(0), shape(a), cuda::CudaBackend::of(a).compute());
}
void max_bwd(const StepArgs& a) {
  cuda::max_pool2d_backward(a.out<float>(), a.in<float>(0), a.in<uint8_t>(1), shape(a), a.accumulate, cuda::CudaBackend::of(a).compute());
}
void avg_fwd(const StepArgs& a) { cuda::avg_pool2d_forward(a.out<float>(), a.in<float>(0), shape(a), cuda::CudaBackend::of(a).compute()); }
void avg_bwd(const StepArgs& a) {
  cuda::avg_pool2d_backward(a.out<float>(), a.in<float>(0), shape(a), a.accumulate, cuda::CudaBackend::of(a).compute());
}
void gap_fwd(const StepArgs& a) {
  const GlobalPoolGeometry& s = ops::geometry<GlobalPoolGeometry>(*a.node);
  cuda::global_avg_pool_forward(a.out<float>(), a.in<float>(0), a.n, s.c, s.hw, cuda::CudaBackend::of(a).compute());
}
void gap_bwd(const StepArgs& a) {
  const GlobalPoolGeometry& s = ops::geometry<GlobalPoolGeometry>(*a.node);
  cuda::global_avg_pool_backward(a.out<float>(), a.in<float>(0), a.n, s.c, s.hw, a.accumulate, cuda::CudaBackend::of(a).compute());
}

cpu::AdaptivePool2dShape adaptive_shape(const StepArgs& a) { return ops::at_batch<cpu::AdaptivePool2dShape>(*a.node, a.n); }
void adaptive_fwd(const StepArgs& a) {
  cuda::adaptive_avg_pool2d_forward(a.out<float>(), a.in<float>(0), adaptive_shape(a), cuda::CudaBackend::of(a).compute());
}
void adaptive_bwd(const StepArgs& a) {
  cuda::adaptive_avg_pool2d_backward(a.out<float>(), a.in<float>(0), adaptive_shape(a), a.accumulate,
                                     cuda::CudaBackend::of(a).compute());
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  t.add(kMaxPool2d, Device::CUDA, DType::F32, OpImpl(max_fwd));
  t.add(kMaxPool2dBwd, Device::CUDA, DType::F32, OpImpl(max_bwd));
  t.add(kAvgPool2d, Device::CUDA, DType::F32, OpImpl(avg_fwd));
  t.add(kAvgPool2dBwd, Device::CUDA, DType::F32, OpImpl(avg_bwd));
  t.add(kGlobalAvgPool, Device::CUDA, DType::F32, OpImpl(gap_fwd));
  t.add(kGlobalAvgPoolBwd, Device::CUDA, DType::F32, OpImpl(gap_bwd));
  t.add(kAdaptiveAvgPool2d, Device::CUDA, DType::F32, OpImpl(adaptive_fwd));
  t.add(kAdaptiveAvgPool2dBwd, Device::CUDA, DType::F32, OpImpl(adaptive_bwd));
}

}  // namespace crumb
