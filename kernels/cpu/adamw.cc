// AdamW over the flat parameter block, op for op as torch.optim.AdamW (foreach=False) in float32.
#include <cmath>

#include "kernels/cpu/step_runs.h"
#include "kernels/adamw.h"

namespace crumb::cpu {

void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t count,
                const AdamWScalars& s, const StepExtras& x) {
  // torch.lerp picks its formula by the weight for accuracy; the weight is uniform, so is the branch.
  const bool small_weight = s.beta1_weight < 0.5f;
  const float w = s.beta1_weight, one_minus_w = 1.0f - s.beta1_weight, scale = x.grad_scale;
  detail::update_in_runs(params, count, x, [&](std::ptrdiff_t begin, std::ptrdiff_t end) {
#pragma omp simd
    for (std::ptrdiff_t i = begin; i < end; ++i) {
      const float g = grads[i] * scale;
      const float p = params[i] * s.decay;
      const float m0 = exp_avg[i];
      const float m = small_weight ? m0 + w * (g - m0) : g - (g - m0) * one_minus_w;
      const float v = exp_avg_sq[i] * s.beta2 + s.beta2_weight * g * g;
      const float denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      params[i] = p + s.neg_step_size * m / denom;
    }
  });
}

}  // namespace crumb::cpu
