// linear's CUDA rows: cuBLAS GEMMs (kernels/cuda/blas.h) on the compute stream, TF32 when the graph
// allows it.
#include "engine/cuda/cuda_backend.h"
#include "engine/base/registry.h"
#include "engine/ops/linear.h"
#include "kernels/cuda/blas.h"

namespace crumb {
namespace {

void fwd(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  cuda::linear_forward(cuda::CudaBackend::of(a).blas(), a.out<float>(), a.in<float>(0), a.in<float>(1),
                       a.node->in.size() == 3 ? a.in<float>(2) : nullptr, a.n, s.in, s.out, a.graph->tf32());
}
void bwd_data(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  cuda::linear_backward_data(cuda::CudaBackend::of(a).blas(), a.out<float>(), a.in<float>(0), a.in<float>(1), a.n, s.in, s.out, a.accumulate,
                             a.graph->tf32());
}
void bwd_weight(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  cuda::linear_backward_weight(cuda::CudaBackend::of(a).blas(), a.out<float>(0), a.node->out.size() == 2 ? a.out<float>(1) : nullptr,
                               a.in<float>(0), a.in<float>(1), a.n, s.in, s.out, a.accumulate, a.graph->tf32());
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  t.add(kLinear, Device::CUDA, DType::F32, OpImpl(fwd));
  t.add(kLinearBwdData, Device::CUDA, DType::F32, OpImpl(bwd_data));
  t.add(kLinearBwdWeight, Device::CUDA, DType::F32, OpImpl(bwd_weight));
}

}  // namespace crumb
