#include <cmath>

#include "kernels/cpu/kernel_util.h"
#include "kernels/elementwise.h"

namespace crumb::cpu {
namespace {
using detail::kParallelGrain;
using detail::load;
using detail::put;
using detail::store;
using detail::with_write_mode;

// Runs f(i) for i in [0, count), threaded only once the range is worth a fork/join. `simd` is safe
// for in-place use because every f touches its arrays at index i only. The `if` names `parallel`: on a
// combined construct a plain `if` applies to `simd` too (OpenMP 5), and GCC ran every range under the
// grain scalar (mlp's ReLU backward, 7% of its step, one element and one mispredicted branch at a time).
template <class F> void for_each_index(std::size_t count, F f) {
  const auto end = static_cast<std::ptrdiff_t>(count);
#pragma omp parallel for simd schedule(static) firstprivate(f) if (parallel : end > kParallelGrain)
  for (std::ptrdiff_t i = 0; i < end; ++i) f(i);
}

}  // namespace

// NaN propagates (NaN <= 0 is false), as in PyTorch: a diverged activation stays visible downstream
// instead of turning into a plausible 0.
template <class T> void relu_forward(T* y, const T* x, std::size_t count) {
  using A = Arith<T>;
  for_each_index(count, [=](std::ptrdiff_t i) {
    const A v = load(x[i]);
    y[i] = store<T>(v <= A(0) ? A(0) : v);
  });
}

// dy is loaded whatever the mask: a load under the condition kept GCC from vectorising the loop, which ran
// scalar with a branch per element that the mask's coin flips mispredicted (6% of mlp's step).
template <class T> void relu_backward(T* dx, const T* dy, const T* y, std::size_t count, bool accumulate) {
  using A = Arith<T>;
  with_write_mode(accumulate, [=](auto acc) {
    for_each_index(count, [=](std::ptrdiff_t i) {
      const A g = load(dy[i]);
      put(acc, dx[i], load(y[i]) > A(0) ? g : A(0));
    });
  });
}

// Comparisons as ReLU's: NaN fails every one, so it passes through the forward and stops the gradient.
template <class T> void leaky_relu_forward(T* y, const T* x, std::size_t count, double slope) {
  using A = Arith<T>;
  const A s = static_cast<A>(slope);
  for_each_index(count, [=](std::ptrdiff_t i) {
    const A v = load(x[i]);
    y[i] = store<T>(v < A(0) ? s * v : v);
  });
}

template <class T>
void leaky_relu_backward(T* dx, const T* dy, const T* y, std::size_t count, double slope, bool accumulate) {
  using A = Arith<T>;
  const A s = static_cast<A>(slope);
  with_write_mode(accumulate, [=](auto acc) {
    for_each_index(count, [=](std::ptrdiff_t i) {
      const A g = load(dy[i]), v = load(y[i]);
      put(acc, dx[i], v > A(0) ? g : v <= A(0) ? s * g : A(0));
    });
  });
}

template <class T> void hardtanh_forward(T* y, const T* x, std::size_t count, double lo, double hi) {
  using A = Arith<T>;
  const A l = static_cast<A>(lo), h = static_cast<A>(hi);
  for_each_index(count, [=](std::ptrdiff_t i) {
    const A v = load(x[i]);
    y[i] = store<T>(v < l ? l : v > h ? h : v);
  });
}

// The bounds as the forward stored them: in 16 bits, a clamped output is the bound rounded, which a
// comparison with the exact bound could take for a value inside.
template <class T>
void hardtanh_backward(T* dx, const T* dy, const T* y, std::size_t count, double lo, double hi, bool accumulate) {
  using A = Arith<T>;
  const A l = load(store<T>(static_cast<A>(lo))), h = load(store<T>(static_cast<A>(hi)));
  with_write_mode(accumulate, [=](auto acc) {
    for_each_index(count, [=](std::ptrdiff_t i) {
      const A v = load(y[i]), g = load(dy[i]);
      put(acc, dx[i], v > l && v < h ? g : A(0));
    });
  });
}

template <class T> void add_forward(T* y, const T* a, const T* b, std::size_t count) {
  for_each_index(count, [=](std::ptrdiff_t i) { y[i] = store<T>(load(a[i]) + load(b[i])); });
}

template <class T> void copy_or_accumulate(T* y, const T* x, std::size_t count, bool accumulate) {
  with_write_mode(accumulate, [=](auto acc) {
    for_each_index(count, [=](std::ptrdiff_t i) { put(acc, y[i], load(x[i])); });
  });
}

namespace {
template <class T> std::size_t nonfinite_in(const T* x, std::size_t count) {
  const auto end = static_cast<std::ptrdiff_t>(count);
  std::size_t bad = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : bad) if (parallel : end > kParallelGrain)
  for (std::ptrdiff_t i = 0; i < end; ++i) bad += !std::isfinite(x[i]);
  return bad;
}
}  // namespace

std::size_t count_nonfinite(const float* x, std::size_t count) { return nonfinite_in(x, count); }
std::size_t count_nonfinite(const double* x, std::size_t count) { return nonfinite_in(x, count); }

#define CRUMB_INSTANTIATE(T)                                                            \
  template void relu_forward<T>(T*, const T*, std::size_t);                            \
  template void relu_backward<T>(T*, const T*, const T*, std::size_t, bool);           \
  template void leaky_relu_forward<T>(T*, const T*, std::size_t, double);               \
  template void leaky_relu_backward<T>(T*, const T*, const T*, std::size_t, double, bool); \
  template void hardtanh_forward<T>(T*, const T*, std::size_t, double, double);          \
  template void hardtanh_backward<T>(T*, const T*, const T*, std::size_t, double, double, bool); \
  template void add_forward<T>(T*, const T*, const T*, std::size_t);                   \
  template void copy_or_accumulate<T>(T*, const T*, std::size_t, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
CRUMB_INSTANTIATE(bf16)
CRUMB_INSTANTIATE(f16)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
