// Each kernel splits the output features (or, for dx, the input features) across threads; every
// thread runs its own single-threaded GEMM on its column block.
#include "kernels/cpu/kernel_util.h"
#include "kernels/linear.h"

namespace crumb::cpu {
using detail::assign;
using detail::CMatR;
using detail::CVecMap;
using detail::gemm;
using detail::MatR;
using detail::parallel_ranges;
using detail::VecMap;

template <class T> void linear_forward(T* y, const T* x, const T* w, const T* b, int n, int in, int out, bool relu) {
  MatR<T> Y(y, n, out);
  const CMatR<T> X(x, n, in), W(w, out, in);
  parallel_ranges(out, 1.0 * n * in * out, [&](Eigen::Index o0, Eigen::Index o1) {
    auto Yb = Y.middleCols(o0, o1 - o0);
    // Seeding y with the bias lets the GEMM's own `+=` add it for free.
    if (b) {
      Yb.rowwise() = CVecMap<T>(b + o0, o1 - o0).transpose();
    } else {
      Yb.setZero();
    }
    gemm(Yb, X, W.middleRows(o0, o1 - o0).transpose(), true);
    // relu_forward's rule: NaN propagates, -0 becomes 0.
    if (relu) Yb = Yb.unaryExpr([](T v) { return v <= T(0) ? T(0) : v; });
  });
}

template <class T>
void linear_backward_data(T* dx, const T* dy, const T* w, int n, int in, int out, bool accumulate) {
  MatR<T> DX(dx, n, in);
  const CMatR<T> DY(dy, n, out), W(w, out, in);
  parallel_ranges(in, 1.0 * n * in * out, [&](Eigen::Index i0, Eigen::Index i1) {
    gemm(DX.middleCols(i0, i1 - i0), DY, W.middleCols(i0, i1 - i0), accumulate);
  });
}

template <class T>
void linear_backward_weight(T* dw, T* db, const T* dy, const T* x, int n, int in, int out, bool accumulate) {
  MatR<T> DW(dw, out, in);
  const CMatR<T> DY(dy, n, out), X(x, n, in);
  parallel_ranges(out, 1.0 * n * in * out, [&](Eigen::Index o0, Eigen::Index o1) {
    const auto DYb = DY.middleCols(o0, o1 - o0);
    gemm(DW.middleRows(o0, o1 - o0), DYb.transpose(), X, accumulate);
    if (db) assign(VecMap<T>(db + o0, o1 - o0), DYb.colwise().sum().transpose(), accumulate);
  });
}

#define CRUMB_INSTANTIATE(T)                                                                            \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int, bool);             \
  template void linear_backward_data<T>(T*, const T*, const T*, int, int, int, bool);                 \
  template void linear_backward_weight<T>(T*, T*, const T*, const T*, int, int, int, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
