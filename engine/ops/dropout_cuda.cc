// Dropout's CUDA rows: the CPU's map and mask (kernels/cuda/dropout.cu), on the compute stream. The key
// is read from device memory, so recorded runs replay with each micro-batch's own key.
#include "engine/cuda/cuda_backend.h"
#include "engine/base/registry.h"
#include "engine/ops/dropout.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/elementwise.h"

namespace crumb {
namespace {

void dropout(const StepArgs& a) {
  const std::size_t count = ops::out_count(a);
  cudaStream_t stream = cuda::CudaBackend::of(a).compute();
  if (!a.training) {
    if (a.out<float>() != a.in<float>(0)) cuda::copy_or_accumulate(a.out<float>(), a.in<float>(0), count, false, stream);
    return;
  }
  const DropoutAttrs& at = ops::attrs<DropoutAttrs>(*a.node);
  cuda::dropout(a.out<float>(), a.in<float>(0), a.n, count / a.n, a.random, at.layer, at.threshold(),
                static_cast<float>(at.scale()), a.accumulate, stream);
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  t.add(kDropout, Device::CUDA, DType::F32, OpImpl(dropout));
  t.add(kDropoutBwd, Device::CUDA, DType::F32, OpImpl(dropout));
}

}  // namespace crumb
