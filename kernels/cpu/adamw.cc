// AdamW over the flat parameter block, op for op as torch.optim.AdamW (foreach=False) in float32.
#include <cmath>

#include "kernels/cpu/kernel_util.h"
#include "kernels/adamw.h"

namespace crumb::cpu {

void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t count,
                const AdamWScalars& s, const StepExtras& x) {
  const auto end = static_cast<std::ptrdiff_t>(count);
  // torch.lerp picks its formula by the weight for accuracy; the weight is uniform, so is the branch.
  const bool small_weight = s.beta1_weight < 0.5f;
  const float w = s.beta1_weight, one_minus_w = 1.0f - s.beta1_weight, scale = x.grad_scale;
  void* const copy = x.copy;
  with_copy_type(x, [&](auto copy_type) {
  using C = decltype(copy_type);
#pragma omp parallel for simd schedule(static) if (end > detail::kParallelGrain)
  for (std::ptrdiff_t i = 0; i < end; ++i) {
    const float g = grads[i] * scale;
    const float p = params[i] * s.decay;
    const float m0 = exp_avg[i];
    const float m = small_weight ? m0 + w * (g - m0) : g - (g - m0) * one_minus_w;
    const float v = exp_avg_sq[i] * s.beta2 + s.beta2_weight * g * g;
    const float denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    params[i] = p + s.neg_step_size * m / denom;
    store_copy<C>(copy, i, params[i]);
  }
  });
}

}  // namespace crumb::cpu
