// Elementwise ops' CUDA rows: custom kernels (kernels/cuda/elementwise.cu) on the compute stream.
#include "engine/cuda/cuda_backend.h"
#include "engine/base/registry.h"
#include "engine/ops/elementwise.h"
#include "kernels/cuda/elementwise.h"

namespace crumb {
namespace {

using ops::out_count;

void relu_fwd(const StepArgs& a) { cuda::relu_forward(a.out<float>(), a.in<float>(0), out_count(a), cuda::CudaBackend::of(a).compute()); }
void relu_bwd(const StepArgs& a) {
  cuda::relu_backward(a.out<float>(), a.in<float>(0), a.in<float>(1), out_count(a), a.accumulate, cuda::CudaBackend::of(a).compute());
}
void add(const StepArgs& a) {
  cuda::add_forward(a.out<float>(), a.in<float>(0), a.in<float>(1), out_count(a), cuda::CudaBackend::of(a).compute());
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  t.add(kRelu, Device::CUDA, DType::F32, OpImpl(relu_fwd));
  t.add(kReluBwd, Device::CUDA, DType::F32, OpImpl(relu_bwd));
  t.add(kAdd, Device::CUDA, DType::F32, OpImpl(add));
}

}  // namespace crumb
