// The three GEMMs on ordered_gemm's register tiles, each read in place but the forward's weight, which
// the tiles want as [in, out] (contiguous along the output features) and get as a transposed copy in
// the workspace. Every output entry is one fixed sequence of fmas, so the forward pass gives the same
// bits for a sample whatever the micro-batch it runs in and however the threads split it. Threads split
// the larger dimension of the output, each running its own single-threaded tiles.
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/ordered_gemm.h"
#include "kernels/linear.h"

namespace crumb::cpu {
using detail::CMatR;
using detail::ordered_gemm;
using detail::ordered_gemm_tn;
using detail::parallel_ranges;
using detail::VecMap;

std::size_t linear_forward_workspace(int in, int out) { return std::size_t(in) * std::size_t(out); }

namespace {
// f(rows [r0, r1), cols [c0, c1)) over blocks of a rows x cols output, split along the longer side.
template <class F> void split_output(std::ptrdiff_t rows, std::ptrdiff_t cols, double work, F&& f) {
  if (rows >= cols) {
    parallel_ranges(rows, work, [&](Eigen::Index r0, Eigen::Index r1) { f(r0, r1, 0, cols); });
  } else {
    parallel_ranges(cols, work, [&](Eigen::Index c0, Eigen::Index c1) { f(0, rows, c0, c1); });
  }
}
}  // namespace

template <class T>
void linear_forward(T* y, const T* x, const T* w, const T* b, int n, int in, int out, T* workspace, bool relu) {
  T* wt = workspace;
  detail::transpose_into(wt, w, out, in, in);
  split_output(n, out, 1.0 * n * in * out, [&](std::ptrdiff_t r0, std::ptrdiff_t r1, std::ptrdiff_t c0, std::ptrdiff_t c1) {
    T* yb = y + r0 * out + c0;
    // Seeding y with the bias starts every entry's fma sequence at it.
    if (b)
      for (std::ptrdiff_t r = r0; r < r1; ++r) std::copy(b + c0, b + c1, y + r * out + c0);
    ordered_gemm(yb, out, x + r0 * in, in, wt + c0, out, r1 - r0, c1 - c0, in, static_cast<const T*>(nullptr),
                 b != nullptr);
    // relu_forward's rule: NaN propagates, -0 becomes 0.
    if (relu)
      for (std::ptrdiff_t r = r0; r < r1; ++r)
        for (T* v = y + r * out + c0; v < y + r * out + c1; ++v) *v = *v <= T(0) ? T(0) : *v;
  });
}

template <class T>
void linear_backward_data(T* dx, const T* dy, const T* w, int n, int in, int out, bool accumulate) {
  split_output(n, in, 1.0 * n * in * out, [&](std::ptrdiff_t r0, std::ptrdiff_t r1, std::ptrdiff_t c0, std::ptrdiff_t c1) {
    ordered_gemm(dx + r0 * in + c0, in, dy + r0 * out, out, w + c0, in, r1 - r0, c1 - c0, out,
                 static_cast<const T*>(nullptr), accumulate);
  });
}

template <class T>
void linear_backward_weight(T* dw, T* db, const T* dy, const T* x, int n, int in, int out, bool accumulate) {
  split_output(out, in, 1.0 * n * in * out, [&](std::ptrdiff_t r0, std::ptrdiff_t r1, std::ptrdiff_t c0, std::ptrdiff_t c1) {
    ordered_gemm_tn(dw + r0 * in + c0, in, dy + r0, out, x + c0, in, r1 - r0, c1 - c0, n, accumulate);
    if (db && c0 == 0) {
      const auto sums = CMatR<T>(dy, n, out).middleCols(r0, r1 - r0).colwise().sum().transpose();
      detail::assign(VecMap<T>(db + r0, r1 - r0), sums, accumulate);
    }
  });
}

#define CRUMB_INSTANTIATE(T)                                                                            \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int, T*, bool);         \
  template void linear_backward_data<T>(T*, const T*, const T*, int, int, int, bool);                 \
  template void linear_backward_weight<T>(T*, T*, const T*, const T*, int, int, int, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
