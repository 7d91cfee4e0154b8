// AdamW over the engine's single contiguous parameter block: one launch updates every parameter, op for
// op as torch.optim.AdamW (foreach=False) and the CPU twin in kernels/cpu/adamw.cc.
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/adamw.h"

namespace crumb::cuda {
namespace {
using detail::blocks_for;
using detail::global_index;
using detail::kBlock;

template <class C>
__global__ void adamw_step_kernel(float* __restrict__ params, const float* __restrict__ grads,
                                  float* __restrict__ exp_avg, float* __restrict__ exp_avg_sq, std::size_t count,
                                  AdamWScalars s, float grad_scale, void* __restrict__ copy) {
  const std::size_t i = global_index();
  if (i >= count) return;
  const float g = grads[i] * grad_scale;
  const float p = params[i] * s.decay;
  const float m0 = exp_avg[i];
  // torch.lerp picks its formula by the weight for accuracy; the branch is uniform over the grid.
  const float m = s.beta1_weight < 0.5f ? m0 + s.beta1_weight * (g - m0) : g - (g - m0) * (1.0f - s.beta1_weight);
  const float v = exp_avg_sq[i] * s.beta2 + s.beta2_weight * g * g;
  // IEEE sqrt and division (nvcc's defaults without --use_fast_math), as on the CPU.
  const float denom = sqrtf(v) / s.bc2_sqrt + s.eps;
  exp_avg[i] = m;
  exp_avg_sq[i] = v;
  const float updated = p + s.neg_step_size * m / denom;
  params[i] = updated;
  store_copy<C>(copy, i, updated);
}

}  // namespace

void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t count,
                const AdamWScalars& s, const StepExtras& x, cudaStream_t stream) {
  CRUMB_CHECK(count == 0 || (exp_avg != nullptr && exp_avg_sq != nullptr), "adamw_step: needs exp_avg and exp_avg_sq");
  if (count == 0) return;
  with_copy_type(x, [&](auto copy_type) {
    adamw_step_kernel<decltype(copy_type)><<<blocks_for(count), kBlock, 0, stream>>>(params, grads, exp_avg, exp_avg_sq,
                                                                                    count, s, x.grad_scale, x.copy);
  });
  CRUMB_CUDA_CHECK_LAUNCH();
}

}  // namespace crumb::cuda
