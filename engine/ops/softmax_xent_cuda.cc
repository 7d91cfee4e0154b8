// Softmax cross-entropy's CUDA rows (kernels/cuda/softmax_xent.cu): the forward adds the loss sum and
// correct count into its metric outputs, in device memory.
#include "engine/cuda/cuda_backend.h"
#include "engine/base/registry.h"
#include "engine/ops/softmax_xent.h"
#include "kernels/cuda/softmax_xent.h"

namespace crumb {
namespace {

int classes(const StepArgs& a) { return ops::geometry<ClassesGeometry>(*a.node).k; }

void fwd(const StepArgs& a) {
  static_assert(sizeof(unsigned long long) == sizeof(int64_t));
  cuda::softmax_xent_forward(a.out<float>(), a.in<float>(0), a.in<int32_t>(1), a.n, classes(a), a.out<double>(1),
                             reinterpret_cast<unsigned long long*>(a.out<int64_t>(2)), cuda::CudaBackend::of(a).compute());
}
void bwd(const StepArgs& a) {
  cuda::softmax_xent_backward(a.out<float>(), a.in<float>(0), a.in<int32_t>(1), a.n, classes(a),
                              static_cast<float>(a.loss_scale), a.accumulate, cuda::CudaBackend::of(a).compute());
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  t.add(kSoftmaxXent, Device::CUDA, DType::F32, OpImpl(fwd));
  t.add(kSoftmaxXentBwd, Device::CUDA, DType::F32, OpImpl(bwd));
}

}  // namespace crumb
