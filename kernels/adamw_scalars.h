// The per-step scalars of an AdamW step, computed on the host the way torch.optim.AdamW computes them
// (foreach=False, capturable=False): in double, as Python floats, and rounded to float only where the
// float32 tensor op takes them. Shared by the CPU and CUDA kernels so both see the same numbers.
#pragma once
#include <cmath>

namespace crumb {

struct AdamWScalars {
  float decay;           // 1 - lr * weight_decay          (param.mul_)
  float beta1_weight;    // 1 - beta1                      (exp_avg.lerp_(grad, 1 - beta1))
  float beta2;           // beta2                          (exp_avg_sq.mul_(beta2))
  float beta2_weight;    // 1 - beta2                      (.addcmul_(grad, grad, value=1 - beta2))
  float bc2_sqrt;        // sqrt(1 - beta2^step)           (exp_avg_sq.sqrt() / bias_correction2_sqrt)
  float eps;             //                                (.add_(eps))
  float neg_step_size;   // -lr / (1 - beta1^step)         (param.addcdiv_(exp_avg, denom, value=-step_size))
};

// step is the 1-based count PyTorch holds after incrementing state["step"]. pow(x, 0.5), not sqrt, as
// Python evaluates bias_correction2**0.5.
inline AdamWScalars adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                                  long long step) {
  const double s = static_cast<double>(step);
  const double bias_correction1 = 1 - std::pow(beta1, s);
  const double bias_correction2 = 1 - std::pow(beta2, s);
  return {static_cast<float>(1 - lr * weight_decay), static_cast<float>(1 - beta1), static_cast<float>(beta2),
          static_cast<float>(1 - beta2),             static_cast<float>(std::pow(bias_correction2, 0.5)),
          static_cast<float>(eps),                   static_cast<float>(-(lr / bias_correction1))};
}

}  // namespace crumb
