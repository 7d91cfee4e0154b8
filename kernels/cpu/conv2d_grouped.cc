#include "kernels/cpu/conv2d_grouped.h"

#include <algorithm>

#include "kernels/conv2d.h"
#include "kernels/cpu/kernel_util.h"

namespace crumb::cpu::detail {
namespace {

bool depthwise(const Conv2dShape& s) { return s.groups == s.c_in; }

// One group as an ungrouped convolution of the same batch.
Conv2dShape group_shape(const Conv2dShape& s) {
  Conv2dShape g = s;
  g.c_in = s.c_in / s.groups;
  g.c_out = s.c_out / s.groups;
  g.groups = 1;
  return g;
}

std::ptrdiff_t in_plane(const Conv2dShape& s) { return std::ptrdiff_t{s.h} * s.w; }
std::ptrdiff_t out_plane(const Conv2dShape& s) { return std::ptrdiff_t{s.h_out} * s.w_out; }
double macs(const Conv2dShape& s) { return 1.0 * s.n * s.c_out * out_plane(s) * s.kh * s.kw; }

// Elements of the copies of one group's input and output channels (GroupCopies).
std::size_t copies(const Conv2dShape& s) {
  const Conv2dShape g = group_shape(s);
  return static_cast<std::size_t>(std::ptrdiff_t{s.n} * (g.c_in * in_plane(s) + g.c_out * out_plane(s)));
}

// Channels [first, first + count) of each of n samples of `channels` planes, to or from a dense copy.
template <class T>
void gather(T* dense, const T* v, int n, int channels, int first, int count, std::ptrdiff_t plane) {
  for (int i = 0; i < n; ++i)
    std::copy_n(v + (std::ptrdiff_t{i} * channels + first) * plane, count * plane,
                dense + std::ptrdiff_t{i} * count * plane);
}
template <class T>
void scatter(T* v, const T* dense, int n, int channels, int first, int count, std::ptrdiff_t plane, bool accumulate) {
  for (int i = 0; i < n; ++i) {
    T* dst = v + (std::ptrdiff_t{i} * channels + first) * plane;
    const T* src = dense + std::ptrdiff_t{i} * count * plane;
    if (accumulate) {
      for (std::ptrdiff_t e = 0; e < count * plane; ++e) dst[e] += src[e];
    } else {
      std::copy_n(src, count * plane, dst);
    }
  }
}

// ---- depthwise: output channel co reads input channel co / m, m = c_out / c_in.

// Calls f(ih, ki) for each kernel row ki of output row oh that lands inside the image, on input row ih.
template <class F> void for_each_row_tap(const Conv2dShape& s, int oh, F&& f) {
  for (int ki = 0; ki < s.kh; ++ki) {
    const int ih = oh * s.stride_h - s.pad_h + ki;
    if (ih >= 0 && ih < s.h) f(ih, ki);
  }
}

// acc[o] += wv * in[o * stride] for o in [0, len): one kernel tap along an output row.
template <class T> inline void axpy_row(T* acc, const T* in, T wv, int len, int stride) {
  if (stride == 1) {
    for (int o = 0; o < len; ++o) acc[o] += wv * in[o];
  } else {
    for (int o = 0; o < len; ++o) acc[o] += wv * in[std::ptrdiff_t{o} * stride];
  }
}

template <class T> void depthwise_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s) {
  const int m = s.c_out / s.c_in, taps = s.kh * s.kw;
  const std::ptrdiff_t planes = std::ptrdiff_t{s.n} * s.c_out;
#pragma omp parallel for schedule(static) if (macs(s) > kParallelMacs)
  for (std::ptrdiff_t p = 0; p < planes; ++p) {
    const int i = static_cast<int>(p / s.c_out), co = static_cast<int>(p % s.c_out);
    const T* X = x + (std::ptrdiff_t{i} * s.c_in + co / m) * in_plane(s);
    const T* W = w + std::ptrdiff_t{co} * taps;
    T* Y = y + p * out_plane(s);
    std::fill(Y, Y + out_plane(s), b ? b[co] : T(0));
    for (int oh = 0; oh < s.h_out; ++oh) {
      T* yr = Y + std::ptrdiff_t{oh} * s.w_out;
      for_each_row_tap(s, oh, [&](int ih, int ki) {
        for (int kj = 0; kj < s.kw; ++kj) {
          const Range c = valid_range(kj, s.stride_w, s.pad_w, s.w, s.w_out);
          axpy_row(yr + c.lo, X + std::ptrdiff_t{ih} * s.w + c.lo * s.stride_w - s.pad_w + kj, W[ki * s.kw + kj],
                   c.hi - c.lo, s.stride_w);
        }
      });
    }
  }
}

// dx[o * stride] += wv * dy[o]: the transpose of axpy_row.
template <class T> inline void scatter_row(T* dx, const T* dy, T wv, int len, int stride) {
  if (stride == 1) {
    for (int o = 0; o < len; ++o) dx[o] += wv * dy[o];
  } else {
    for (int o = 0; o < len; ++o) dx[std::ptrdiff_t{o} * stride] += wv * dy[o];
  }
}

template <class T>
void depthwise_backward_data(T* dx, const T* dy, const T* w, const Conv2dShape& s, bool accumulate) {
  const int m = s.c_out / s.c_in, taps = s.kh * s.kw;
  const std::ptrdiff_t planes = std::ptrdiff_t{s.n} * s.c_in;
#pragma omp parallel for schedule(static) if (macs(s) > kParallelMacs)
  for (std::ptrdiff_t p = 0; p < planes; ++p) {
    const int i = static_cast<int>(p / s.c_in), ci = static_cast<int>(p % s.c_in);
    T* DX = dx + p * in_plane(s);
    if (!accumulate) std::fill(DX, DX + in_plane(s), T(0));
    for (int co = ci * m; co < (ci + 1) * m; ++co) {
      const T* DY = dy + (std::ptrdiff_t{i} * s.c_out + co) * out_plane(s);
      const T* W = w + std::ptrdiff_t{co} * taps;
      for (int oh = 0; oh < s.h_out; ++oh) {
        const T* dyr = DY + std::ptrdiff_t{oh} * s.w_out;
        for_each_row_tap(s, oh, [&](int ih, int ki) {
          for (int kj = 0; kj < s.kw; ++kj) {
            const Range c = valid_range(kj, s.stride_w, s.pad_w, s.w, s.w_out);
            scatter_row(DX + std::ptrdiff_t{ih} * s.w + c.lo * s.stride_w - s.pad_w + kj, dyr + c.lo,
                        W[ki * s.kw + kj], c.hi - c.lo, s.stride_w);
          }
        });
      }
    }
  }
}

// Each row's dot product in T (it vectorizes); the sum over rows and samples in double, as it runs over
// the whole batch.
template <class T>
void depthwise_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, bool accumulate) {
  const int m = s.c_out / s.c_in, taps = s.kh * s.kw;
  with_write_mode(accumulate, [&](auto acc) {
#pragma omp parallel for schedule(static) if (macs(s) > kParallelMacs)
    for (int co = 0; co < s.c_out; ++co) {
      for (int ki = 0; ki < s.kh; ++ki) {
        const Range r = valid_range(ki, s.stride_h, s.pad_h, s.h, s.h_out);
        for (int kj = 0; kj < s.kw; ++kj) {
          const Range c = valid_range(kj, s.stride_w, s.pad_w, s.w, s.w_out);
          double sum = 0;
          for (int i = 0; i < s.n; ++i) {
            const T* X = x + (std::ptrdiff_t{i} * s.c_in + co / m) * in_plane(s);
            const T* DY = dy + (std::ptrdiff_t{i} * s.c_out + co) * out_plane(s);
            for (int oh = r.lo; oh < r.hi; ++oh) {
              const T* xr = X + std::ptrdiff_t{oh * s.stride_h - s.pad_h + ki} * s.w + c.lo * s.stride_w - s.pad_w + kj;
              const T* dyr = DY + std::ptrdiff_t{oh} * s.w_out + c.lo;
              T row(0);
              if (s.stride_w == 1) {
                for (int o = 0; o < c.hi - c.lo; ++o) row += dyr[o] * xr[o];
              } else {
                for (int o = 0; o < c.hi - c.lo; ++o) row += dyr[o] * xr[std::ptrdiff_t{o} * s.stride_w];
              }
              sum += row;
            }
          }
          put(acc, dw[std::ptrdiff_t{co} * taps + ki * s.kw + kj], static_cast<T>(sum));
        }
      }
      if (db) {
        double sum = 0;
        for (int i = 0; i < s.n; ++i) {
          const T* DY = dy + (std::ptrdiff_t{i} * s.c_out + co) * out_plane(s);
          sum += lane_sum(DY, out_plane(s));
        }
        put(acc, db[co], static_cast<T>(sum));
      }
    }
  });
}

}  // namespace

std::size_t grouped_forward_workspace(const Conv2dShape& s) {
  return depthwise(s) ? 0 : copies(s) + conv2d_forward_workspace(group_shape(s));
}
std::size_t grouped_backward_data_workspace(const Conv2dShape& s) {
  return depthwise(s) ? 0 : copies(s) + conv2d_backward_data_workspace(group_shape(s));
}
std::size_t grouped_backward_weight_workspace(const Conv2dShape& s) {
  return depthwise(s) ? 0 : copies(s) + conv2d_backward_weight_workspace(group_shape(s));
}

// One group's copies in the workspace: its input channels (x_g or dx_g, [n, c_in / groups, h, w]) at
// the start, its output channels (y_g or dy_g, [n, c_out / groups, h_out, w_out]) after them, the
// ungrouped kernel's workspace after both. Group k's weights (and bias) are a contiguous slice.
template <class T> struct GroupCopies {
  GroupCopies(const Conv2dShape& shape, T* workspace)
      : s(shape), g(group_shape(shape)), in(workspace), out(workspace + std::ptrdiff_t{s.n} * g.c_in * in_plane(s)),
        inner(workspace + copies(s)), w_len(std::ptrdiff_t{g.c_out} * g.c_in * s.kh * s.kw) {}
  void gather_in(const T* v, int k) { gather(in, v, s.n, s.c_in, k * g.c_in, g.c_in, in_plane(s)); }
  void gather_out(const T* v, int k) { gather(out, v, s.n, s.c_out, k * g.c_out, g.c_out, out_plane(s)); }
  void scatter_in(T* v, int k, bool accumulate) {
    scatter(v, in, s.n, s.c_in, k * g.c_in, g.c_in, in_plane(s), accumulate);
  }
  void scatter_out(T* v, int k) { scatter(v, out, s.n, s.c_out, k * g.c_out, g.c_out, out_plane(s), false); }
  template <class P> P* bias(P* b, int k) const { return b ? b + k * g.c_out : nullptr; }

  const Conv2dShape& s;
  const Conv2dShape g;  // one group's shape
  T *in, *out, *inner;
  const std::ptrdiff_t w_len;
};

template <class T> void grouped_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, T* workspace) {
  if (depthwise(s)) return depthwise_forward(y, x, w, b, s);
  GroupCopies<T> c(s, workspace);
  for (int k = 0; k < s.groups; ++k) {
    c.gather_in(x, k);
    conv2d_forward(c.out, c.in, w + k * c.w_len, c.bias(b, k), c.g, c.inner);
    c.scatter_out(y, k);
  }
}

template <class T>
void grouped_backward_data(T* dx, const T* dy, const T* w, const Conv2dShape& s, T* workspace, bool accumulate) {
  if (depthwise(s)) return depthwise_backward_data(dx, dy, w, s, accumulate);
  GroupCopies<T> c(s, workspace);
  for (int k = 0; k < s.groups; ++k) {
    c.gather_out(dy, k);
    conv2d_backward_data(c.in, c.out, w + k * c.w_len, c.g, c.inner, false);
    c.scatter_in(dx, k, accumulate);
  }
}

// The ungrouped kernel writes (or adds) group k's slices of dw and db.
template <class T>
void grouped_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, T* workspace,
                             bool accumulate) {
  if (depthwise(s)) return depthwise_backward_weight(dw, db, dy, x, s, accumulate);
  GroupCopies<T> c(s, workspace);
  for (int k = 0; k < s.groups; ++k) {
    c.gather_in(x, k);
    c.gather_out(dy, k);
    conv2d_backward_weight(dw + k * c.w_len, c.bias(db, k), c.out, c.in, c.g, c.inner, accumulate);
  }
}

#define CRUMB_INSTANTIATE(T)                                                                          \
  template void grouped_forward<T>(T*, const T*, const T*, const T*, const Conv2dShape&, T*);       \
  template void grouped_backward_data<T>(T*, const T*, const T*, const Conv2dShape&, T*, bool);     \
  template void grouped_backward_weight<T>(T*, T*, const T*, const T*, const Conv2dShape&, T*, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu::detail
