// AdamW over the flat parameter block, op for op as torch.optim.AdamW (foreach=False) in float32 (or
// float64).
#include <cmath>

#include "kernels/cpu/step_runs.h"
#include "kernels/adamw.h"

namespace crumb::cpu {
namespace {

template <class T>
void adamw(T* params, const T* grads, T* exp_avg, T* exp_avg_sq, std::size_t count, const AdamWScalarsOf<T>& s,
           const StepExtras& x) {
  // torch.lerp picks its formula by the weight for accuracy; the weight is uniform, so is the branch.
  const bool small_weight = s.beta1_weight < T(0.5);
  const T w = s.beta1_weight, one_minus_w = T(1) - s.beta1_weight, scale = x.grad_scale;
  detail::update_in_runs(params, count, x, [&](std::ptrdiff_t begin, std::ptrdiff_t end) {
#pragma omp simd
    for (std::ptrdiff_t i = begin; i < end; ++i) {
      const T g = grads[i] * scale;
      const T p = params[i] * s.decay;
      const T m0 = exp_avg[i];
      const T m = small_weight ? m0 + w * (g - m0) : g - (g - m0) * one_minus_w;
      const T v = exp_avg_sq[i] * s.beta2 + s.beta2_weight * g * g;
      const T denom = std::sqrt(v) / s.bc2_sqrt + s.eps;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      params[i] = p + s.neg_step_size * m / denom;
    }
  });
}

}  // namespace

void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t count,
                const AdamWScalars& s, const StepExtras& x) {
  adamw(params, grads, exp_avg, exp_avg_sq, count, s, x);
}

void adamw_step(double* params, const double* grads, double* exp_avg, double* exp_avg_sq, std::size_t count,
                const AdamWScalarsOf<double>& s, const StepExtras& x) {
  adamw(params, grads, exp_avg, exp_avg_sq, count, s, x);
}

}  // namespace crumb::cpu
