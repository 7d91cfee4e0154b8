#include <cmath>

#include "kernels/cpu/kernel_util.h"
#include "kernels/softmax_xent.h"

namespace crumb::cpu {
namespace {
using detail::kParallelGrain;
using detail::load;
using detail::put;
using detail::with_write_mode;

// Index of the first maximum of row[0, k), NaN counting as the largest value (PyTorch's argmax): a row
// holding a NaN predicts its first NaN, the same on every device (kernels/cuda/softmax_xent.cu).
template <class T> int argmax(const T* row, int k) {
  int best = 0;
  for (int j = 1; j < k && !std::isnan(load(row[best])); ++j) {
    if (load(row[j]) > load(row[best]) || std::isnan(load(row[j]))) best = j;
  }
  return best;
}

}  // namespace

template <class T>
double softmax_xent_forward(Arith<T>* probs, const T* logits, const int32_t* labels, int n, int k) {
  using A = Arith<T>;
  double loss = 0;
#pragma omp parallel for schedule(static) reduction(+ : loss) if (std::ptrdiff_t{n} * k > kParallelGrain)
  for (int i = 0; i < n; ++i) {
    const T* z = logits + std::ptrdiff_t{i} * k;
    A* p = probs + std::ptrdiff_t{i} * k;
    // Shifting by the row max keeps every exp() in (0, 1], so large logits cannot overflow.
    const A zmax = load(z[argmax(z, k)]);
    double sum = 0;
    for (int j = 0; j < k; ++j) {
      p[j] = std::exp(load(z[j]) - zmax);
      sum += p[j];
    }
    const A inv = static_cast<A>(1 / sum);
    for (int j = 0; j < k; ++j) p[j] *= inv;
    // -log p[label] = log(sum) - (z[label] - zmax), exact even where p[label] underflows to 0.
    loss += std::log(sum) - (static_cast<double>(load(z[labels[i]])) - zmax);
  }
  return loss;
}

template <class T>
void softmax_xent_backward(T* dlogits, const Arith<T>* probs, const int32_t* labels, int n, int k, Arith<T> scale,
                           bool accumulate) {
  using A = Arith<T>;
  with_write_mode(accumulate, [&](auto acc) {
#pragma omp parallel for schedule(static) if (std::ptrdiff_t{n} * k > kParallelGrain)
    for (int i = 0; i < n; ++i) {
      const A* p = probs + std::ptrdiff_t{i} * k;
      T* d = dlogits + std::ptrdiff_t{i} * k;
      for (int j = 0; j < k; ++j) put(acc, d[j], scale * (p[j] - A(j == labels[i])));
    }
  });
}

template <class T> int count_correct(const T* probs, const int32_t* labels, int n, int k) {
  int correct = 0;
  for (int i = 0; i < n; ++i) correct += argmax(probs + std::ptrdiff_t{i} * k, k) == labels[i];
  return correct;
}

#define CRUMB_INSTANTIATE(T)                                                                                \
  template double softmax_xent_forward<T>(Arith<T>*, const T*, const int32_t*, int, int);                  \
  template void softmax_xent_backward<T>(T*, const Arith<T>*, const int32_t*, int, int, Arith<T>, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
CRUMB_INSTANTIATE(bf16)
CRUMB_INSTANTIATE(f16)
template int count_correct<float>(const float*, const int32_t*, int, int);
template int count_correct<double>(const double*, const int32_t*, int, int);
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
