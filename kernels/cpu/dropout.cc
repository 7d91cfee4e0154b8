// Dropout's map on the CPU; the mask is kernels/dropout_mask.h's, which the CUDA twin shares.
#include <cstdint>

#include "kernels/cpu/kernel_util.h"
#include "kernels/dropout.h"

namespace crumb::cpu {

template <class T>
void dropout(T* y, const T* x, int n, std::size_t per_sample, const RandomKey& key, uint64_t layer,
             uint32_t threshold, Arith<T> scale, bool accumulate) {
  const std::ptrdiff_t count = static_cast<std::ptrdiff_t>(per_sample);
  detail::with_write_mode(accumulate, [&](auto acc) {
#pragma omp parallel for schedule(static) if (n * count > detail::kParallelGrain)
    for (int i = 0; i < n; ++i) {
      const uint64_t state = dropout_sample_state(key.batch, layer, key.first_sample + i);
      const T* xs = x + i * count;
      T* ys = y + i * count;
      for (std::ptrdiff_t e = 0; e < count; ++e)
        detail::put(acc, ys[e], dropout_keep(state, e, threshold) ? detail::load(xs[e]) * scale : Arith<T>(0));
    }
  });
}

#define CRUMB_INSTANTIATE(T) \
  template void dropout<T>(T*, const T*, int, std::size_t, const RandomKey&, uint64_t, uint32_t, Arith<T>, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
CRUMB_INSTANTIATE(bf16)
CRUMB_INSTANTIATE(f16)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
