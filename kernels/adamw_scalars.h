// The per-step scalars of an AdamW step, computed on the host the way torch.optim.AdamW computes them
// (foreach=False, capturable=False): in double, as Python floats, and rounded to the parameters' type T
// only where the tensor op takes them (float for float32 parameters; double, unrounded, for float64 ones).
// Shared by the CPU and CUDA kernels so both see the same numbers.
#pragma once
#include <cmath>

namespace crumb {

template <class T> struct AdamWScalarsOf {
  T decay;           // 1 - lr * weight_decay          (param.mul_)
  T beta1_weight;    // 1 - beta1                      (exp_avg.lerp_(grad, 1 - beta1))
  T beta2;           // beta2                          (exp_avg_sq.mul_(beta2))
  T beta2_weight;    // 1 - beta2                      (.addcmul_(grad, grad, value=1 - beta2))
  T bc2_sqrt;        // sqrt(1 - beta2^step)           (exp_avg_sq.sqrt() / bias_correction2_sqrt)
  T eps;             //                                (.add_(eps))
  T neg_step_size;   // -lr / (1 - beta1^step)         (param.addcdiv_(exp_avg, denom, value=-step_size))
};
using AdamWScalars = AdamWScalarsOf<float>;

// step is the 1-based count PyTorch holds after incrementing state["step"]. pow(x, 0.5), not sqrt, as
// Python evaluates bias_correction2**0.5.
template <class T = float>
inline AdamWScalarsOf<T> adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                                       long long step) {
  const double s = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(beta1, s);
  const double bias_correction2 = 1 - std::pow(beta2, s);
  return {static_cast<T>(1 - lr * weight_decay), static_cast<T>(1 - beta1), static_cast<T>(beta2),
          static_cast<T>(1 - beta2),             static_cast<T>(std::pow(bias_correction2, 0.5)),
          static_cast<T>(eps),                   static_cast<T>(-(lr / bias_correction1))};
}

}  // namespace crumb
