#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/kernels.h"

namespace crumb::cpu {
using detail::assign;
using detail::CMatR;
using detail::CVecMap;
using detail::MatR;
using detail::VecMap;

template <class T> void linear_forward(T* y, const T* x, const T* w, const T* b, int n, int in, int out) {
  MatR<T> Y(y, n, out);
  // Seeding y with the bias lets the GEMM's own `+=` add it for free.
  if (b) {
    Y.rowwise() = CVecMap<T>(b, out).transpose();
  } else {
    Y.setZero();
  }
  Y.noalias() += CMatR<T>(x, n, in) * CMatR<T>(w, out, in).transpose();
}

template <class T>
void linear_backward_data(T* dx, const T* dy, const T* w, int n, int in, int out, bool accumulate) {
  assign(MatR<T>(dx, n, in), CMatR<T>(dy, n, out) * CMatR<T>(w, out, in), accumulate);
}

template <class T>
void linear_backward_weight(T* dw, T* db, const T* dy, const T* x, int n, int in, int out, bool accumulate) {
  const CMatR<T> DY(dy, n, out);
  assign(MatR<T>(dw, out, in), DY.transpose() * CMatR<T>(x, n, in), accumulate);
  if (db) assign(VecMap<T>(db, out), DY.colwise().sum().transpose(), accumulate);
}

#define CRUMB_INSTANTIATE(T)                                                                            \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int);                   \
  template void linear_backward_data<T>(T*, const T*, const T*, int, int, int, bool);                 \
  template void linear_backward_weight<T>(T*, T*, const T*, const T*, int, int, int, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
