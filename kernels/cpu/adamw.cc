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
  // torch.lerp picks its formula by the weight for accuracy (the weight is uniform, so is the branch), and
  // its vectorised kernel takes one fma for it: fma(w, end - start, start) or fma(w - 1, end - start, end).
  // Every other operation is rounded on its own as torch's separate tensor ops are: this file is built
  // with -ffp-contract=off (CMakeLists.txt), so no product is fused into a sum that torch rounds apart, and
  // the vectorised body and its scalar remainder give an element the same bits.
  const bool small_weight = s.beta1_weight < T(0.5);
  // Everything the loop reads but the arrays, in locals: read through the closure and `s`, a store to
  // params might change them for all the compiler knows, and the loop ran scalar, reloading each.
  const T coeff = small_weight ? s.beta1_weight : s.beta1_weight - T(1), scale = x.grad_scale, decay = s.decay,
          beta2 = s.beta2, beta2_weight = s.beta2_weight, bc2_sqrt = s.bc2_sqrt, eps = s.eps,
          neg_step_size = s.neg_step_size;
  detail::update_in_runs(params, count, x, [=](std::ptrdiff_t begin, std::ptrdiff_t end) {
    T* __restrict p_ = params;
    T* __restrict m_ = exp_avg;
    T* __restrict v_ = exp_avg_sq;
    const T* __restrict g_ = grads;
#pragma omp simd
    for (std::ptrdiff_t i = begin; i < end; ++i) {
      const T g = g_[i] * scale;
      const T p = p_[i] * decay;
      const T m0 = m_[i];
      const T m = std::fma(coeff, g - m0, small_weight ? m0 : g);
      const T v = v_[i] * beta2 + beta2_weight * g * g;
      const T denom = std::sqrt(v) / bc2_sqrt + eps;
      m_[i] = m;
      v_[i] = v;
      p_[i] = p + neg_step_size * m / denom;
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
