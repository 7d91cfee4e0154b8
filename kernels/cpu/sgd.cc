#include "kernels/cpu/step_runs.h"
#include "kernels/sgd.h"

namespace crumb::cpu {
namespace {

template <class T>
void sgd_step(T* params, const T* grads, T* momentum_buf, std::size_t count, T lr, T momentum, T weight_decay,
              bool nesterov, bool first_step, const StepExtras& x) {
  const T scale = x.grad_scale;
  detail::update_in_runs(params, count, x, [&](std::ptrdiff_t begin, std::ptrdiff_t end) {
    // Plain SGD never touches the buffer, which may then be null.
    if (momentum == T(0)) {
#pragma omp simd
      for (std::ptrdiff_t i = begin; i < end; ++i) params[i] -= lr * (grads[i] * scale + weight_decay * params[i]);
      return;
    }
#pragma omp simd
    for (std::ptrdiff_t i = begin; i < end; ++i) {
      const T g = grads[i] * scale + weight_decay * params[i];
      // A select, not a blend: on the first step the buffer may hold garbage (even NaN).
      const T buf = first_step ? g : momentum * momentum_buf[i] + g;
      momentum_buf[i] = buf;
      params[i] -= lr * (nesterov ? g + momentum * buf : buf);
    }
  });
}

}  // namespace

void sgd_momentum_step(float* params, const float* grads, float* momentum_buf, std::size_t count, float lr,
                       float momentum, float weight_decay, bool nesterov, bool first_step, const StepExtras& x) {
  sgd_step(params, grads, momentum_buf, count, lr, momentum, weight_decay, nesterov, first_step, x);
}

void sgd_momentum_step(double* params, const double* grads, double* momentum_buf, std::size_t count, double lr,
                       double momentum, double weight_decay, bool nesterov, bool first_step, const StepExtras& x) {
  sgd_step(params, grads, momentum_buf, count, lr, momentum, weight_decay, nesterov, first_step, x);
}

}  // namespace crumb::cpu
