// BatchNorm's and GroupNorm's CUDA rows (kernels/cuda/norm.cu) on the compute stream, with the CPU rows'
// logic (engine/ops/norm.cc): the running statistics, num_batches_tracked and the moments stay in device
// memory and are updated there, so a step never waits for the host.
#include "engine/cuda/cuda_backend.h"
#include "engine/base/registry.h"
#include "engine/ops/norm.h"
#include "kernels/cuda/norm.h"

namespace crumb {
namespace {

// As norm.cc's: group 0 normalises the whole micro-batch as one group.
void bn_fwd(const StepArgs& a) {
  const BatchNormAttrs& at = ops::attrs<BatchNormAttrs>(*a.node);
  const cpu::BatchNormShape s = ops::batch_norm_shape(a);
  const cudaStream_t stream = cuda::CudaBackend::of(a).compute();
  // The running statistics are inputs the layer updates in place: persistent State no other node reads
  // in a training pass.
  float* running_mean = const_cast<float*>(a.in<float>(3));
  float* running_var = const_cast<float*>(a.in<float>(4));
  int64_t* tracked = const_cast<int64_t*>(a.in<int64_t>(5));
  if (!a.training || at.frozen) {
    cuda::batch_norm_forward_frozen(a.out<float>(0), a.training ? a.out<float>(1) : nullptr, a.in<float>(0),
                                    a.in<float>(1), a.in<float>(2), running_mean, running_var, s, at.eps, stream);
    return;
  }
  const bool deferred = at.stats == BnStats::Deferred;
  double* moments = a.out<double>(2);
  cuda::batch_norm_forward_train(a.out<float>(0), a.out<float>(1), a.in<float>(0), a.in<float>(1), a.in<float>(2), s,
                                 at.eps, deferred ? moments : nullptr, deferred ? nullptr : running_mean,
                                 deferred ? nullptr : running_var, tracked, at.momentum, stream);
  if (deferred && a.last && a.commit) cuda::batch_norm_commit(running_mean, running_var, tracked, moments, s.c, at.momentum, stream);
}

void bn_commit(const StepArgs& a) {
  const BatchNormAttrs& at = ops::attrs<BatchNormAttrs>(*a.node);
  if (at.frozen || at.stats != BnStats::Deferred) return;
  cuda::batch_norm_commit(const_cast<float*>(a.in<float>(3)), const_cast<float*>(a.in<float>(4)),
                          const_cast<int64_t*>(a.in<int64_t>(5)), a.out<double>(2),
                          static_cast<int>(a.in_value(3).dims[0]), at.momentum, cuda::CudaBackend::of(a).compute());
}

void bn_bwd(const StepArgs& a) {
  const BatchNormAttrs& at = ops::attrs<BatchNormAttrs>(*a.node);
  cuda::batch_norm_backward(a.out<float>(0), a.out<float>(1), a.node->out.size() == 3 ? a.out<float>(2) : nullptr,
                            a.in<float>(0), a.in<float>(1), a.in<float>(2), a.in<float>(3), ops::batch_norm_shape(a), !at.frozen,
                            a.accumulate, cuda::CudaBackend::of(a).compute());
}

void bn_apply(const StepArgs& a) {
  cuda::batch_norm_apply(a.out<float>(0), a.in<float>(0), a.in<float>(1), a.in<float>(2), a.in<float>(3),
                         ops::batch_norm_shape(a), cuda::CudaBackend::of(a).compute());
}

cpu::GroupNormShape gn_shape(const StepArgs& a) { return ops::at_batch<cpu::GroupNormShape>(*a.node, a.n); }

void gn_fwd(const StepArgs& a) {
  cuda::group_norm_forward(a.out<float>(0), a.out<float>(1), a.in<float>(0), a.in<float>(1), a.in<float>(2),
                           gn_shape(a), ops::attrs<GroupNormAttrs>(*a.node).eps, cuda::CudaBackend::of(a).compute());
}

void gn_bwd(const StepArgs& a) {
  cuda::group_norm_backward(a.out<float>(0), a.out<float>(1), a.node->out.size() == 3 ? a.out<float>(2) : nullptr,
                            a.in<float>(0), a.in<float>(1), a.in<float>(2), a.in<float>(3), gn_shape(a), a.accumulate,
                            cuda::CudaBackend::of(a).compute());
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  t.add(kBatchNorm, Device::CUDA, DType::F32, OpImpl(bn_fwd).with_commit(bn_commit));
  t.add(kBatchNormBwd, Device::CUDA, DType::F32, OpImpl(bn_bwd));
  t.add(kBatchNormApply, Device::CUDA, DType::F32, OpImpl(bn_apply));
  t.add(kGroupNorm, Device::CUDA, DType::F32, OpImpl(gn_fwd));
  t.add(kGroupNormBwd, Device::CUDA, DType::F32, OpImpl(gn_bwd));
}

}  // namespace crumb
