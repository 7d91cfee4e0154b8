#include "kernels/cpu/kernel_util.h"
#include "kernels/sgd.h"

namespace crumb::cpu {

void sgd_momentum_step(float* params, const float* grads, float* momentum_buf, std::size_t count, float lr,
                       float momentum, float weight_decay, bool nesterov, bool first_step, const StepExtras& x) {
  const auto end = static_cast<std::ptrdiff_t>(count);
  const float scale = x.grad_scale;
  void* const copy = x.copy;
  with_copy_type(x, [&](auto copy_type) {
    using C = decltype(copy_type);
    // Plain SGD never touches the buffer, which may then be null.
    if (momentum == 0.0f) {
#pragma omp parallel for simd schedule(static) if (end > detail::kParallelGrain)
      for (std::ptrdiff_t i = 0; i < end; ++i) {
        params[i] -= lr * (grads[i] * scale + weight_decay * params[i]);
        store_copy<C>(copy, i, params[i]);
      }
      return;
    }
#pragma omp parallel for simd schedule(static) if (end > detail::kParallelGrain)
    for (std::ptrdiff_t i = 0; i < end; ++i) {
      const float g = grads[i] * scale + weight_decay * params[i];
      // A select, not a blend: on the first step the buffer may hold garbage (even NaN).
      const float buf = first_step ? g : momentum * momentum_buf[i] + g;
      momentum_buf[i] = buf;
      params[i] -= lr * (nesterov ? g + momentum * buf : buf);
      store_copy<C>(copy, i, params[i]);
    }
  });
}

}  // namespace crumb::cpu
