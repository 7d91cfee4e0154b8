// conv2d as im2col + GEMM, one sample at a time. Samples are split into contiguous slices, one per
// thread, each with its own column buffer in the workspace; the per-sample GEMMs run single-threaded
// inside the slice. Per-sample (rather than batch-wide) GEMMs write y / read dy in NCHW directly, so
// no scatter or transpose pass over the activations is needed, and the column buffer stays in L2.
#include <algorithm>

#include <omp.h>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/kernels.h"

namespace crumb::cpu {
namespace {
using detail::assign;
using detail::CMatR;
using detail::CVecMap;
using detail::MatR;
using detail::VecMap;

// The workspace holds at most this many slices; more threads than this idle in the conv kernels.
constexpr int kMaxSlices = 8;
// Below this many multiply-adds a whole conv takes a few microseconds: not worth a fork/join.
constexpr long long kParallelMacs = 1 << 17;

struct Geom {
  std::ptrdiff_t k;      // rows of the column matrix: c_in * kh * kw
  std::ptrdiff_t hw;     // output pixels per channel
  std::ptrdiff_t x_len;  // elements of one input sample
  std::ptrdiff_t y_len;  // elements of one output sample
  bool pointwise;        // 1x1, stride 1, no padding: the input already is the column matrix
  std::ptrdiff_t col;    // column buffer elements per slice
  explicit Geom(const Conv2dShape& s)
      : k(std::ptrdiff_t{s.c_in} * s.kh * s.kw),
        hw(std::ptrdiff_t{s.h_out} * s.w_out),
        x_len(std::ptrdiff_t{s.c_in} * s.h * s.w),
        y_len(std::ptrdiff_t{s.c_out} * hw),
        pointwise(s.kh == 1 && s.kw == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0),
        col(pointwise ? 0 : k * hw) {}
};

int workspace_slices(const Conv2dShape& s) { return std::max(1, std::min(s.n, kMaxSlices)); }

int active_slices(const Conv2dShape& s, const Geom& g) {
  if (1LL * s.n * s.c_out * g.k * g.hw < kParallelMacs) return 1;
  return std::min(workspace_slices(s), omp_get_max_threads());
}

// Runs f(slice, first_sample, end_sample) for contiguous, non-empty sample ranges.
template <class F> void for_each_slice(int slices, int n, F&& f) {
  if (slices == 1) {
    f(0, 0, n);  // outside any parallel region, so Eigen may still thread the GEMMs
    return;
  }
#pragma omp parallel for schedule(static)
  for (int slice = 0; slice < slices; ++slice) f(slice, n * slice / slices, n * (slice + 1) / slices);
}

struct Range {
  int lo, hi;
};

// Output positions o in [lo, hi) whose input coordinate o * stride - pad + k lies in [0, in).
Range valid_range(int k, int stride, int pad, int in, int out) {
  const int lo = std::min(out, pad > k ? (pad - k + stride - 1) / stride : 0);
  const int hi = std::clamp((in + pad - k + stride - 1) / stride, lo, out);
  return {lo, hi};
}

// Visits the column matrix of one sample as segments of w_out elements: for column row
// (c, ki, kj) and output row oh, seg(col_offset, inside, x_offset, range). When `inside`, column
// entries [range.lo, range.hi) of the segment map to x[x_offset + j * stride_w] for j = 0, 1, ...;
// everything else in the segment is padding.
template <class F> void for_each_segment(const Conv2dShape& s, F&& seg) {
  std::ptrdiff_t col_off = 0;
  for (int c = 0; c < s.c_in; ++c) {
    for (int ki = 0; ki < s.kh; ++ki) {
      const Range rh = valid_range(ki, s.stride_h, s.pad_h, s.h, s.h_out);
      for (int kj = 0; kj < s.kw; ++kj) {
        const Range rw = valid_range(kj, s.stride_w, s.pad_w, s.w, s.w_out);
        for (int oh = 0; oh < s.h_out; ++oh, col_off += s.w_out) {
          const bool inside = oh >= rh.lo && oh < rh.hi && rw.lo < rw.hi;
          const std::ptrdiff_t ih = std::ptrdiff_t{oh} * s.stride_h - s.pad_h + ki;
          const std::ptrdiff_t iw = std::ptrdiff_t{rw.lo} * s.stride_w - s.pad_w + kj;
          seg(col_off, inside, inside ? (c * s.h + ih) * s.w + iw : 0, rw);
        }
      }
    }
  }
}

template <class T> void im2col(const Conv2dShape& s, const T* x, T* col) {
  for_each_segment(s, [&](std::ptrdiff_t col_off, bool inside, std::ptrdiff_t x_off, Range r) {
    T* d = col + col_off;
    if (!inside) {
      std::fill(d, d + s.w_out, T(0));
      return;
    }
    std::fill(d, d + r.lo, T(0));
    const T* src = x + x_off;
    const int len = r.hi - r.lo;
    if (s.stride_w == 1) {
      std::copy(src, src + len, d + r.lo);
    } else {
      for (int j = 0; j < len; ++j) d[r.lo + j] = src[std::ptrdiff_t{j} * s.stride_w];
    }
    std::fill(d + r.hi, d + s.w_out, T(0));
  });
}

// Adds the column matrix back onto the image (overlapping windows sum).
template <class T> void col2im_add(const Conv2dShape& s, const T* col, T* dx) {
  for_each_segment(s, [&](std::ptrdiff_t col_off, bool inside, std::ptrdiff_t x_off, Range r) {
    if (!inside) return;
    const T* src = col + col_off + r.lo;
    T* d = dx + x_off;
    const int len = r.hi - r.lo;
    if (s.stride_w == 1) {
      for (int j = 0; j < len; ++j) d[j] += src[j];
    } else {
      for (int j = 0; j < len; ++j) d[std::ptrdiff_t{j} * s.stride_w] += src[j];
    }
  });
}

// The [k, hw] column matrix of sample x_i: x_i itself for pointwise convs, else im2col'd into col.
template <class T> CMatR<T> columns(const Conv2dShape& s, const Geom& g, const T* x_i, T* col) {
  if (g.pointwise) return CMatR<T>(x_i, g.k, g.hw);
  im2col(s, x_i, col);
  return CMatR<T>(col, g.k, g.hw);
}

}  // namespace

std::size_t conv2d_forward_workspace(const Conv2dShape& s) {
  return static_cast<std::size_t>(workspace_slices(s) * Geom(s).col);
}

std::size_t conv2d_backward_data_workspace(const Conv2dShape& s) { return conv2d_forward_workspace(s); }

// Slice 0 accumulates straight into dw/db; the others into partial sums folded in at the end.
std::size_t conv2d_backward_weight_workspace(const Conv2dShape& s) {
  const Geom g(s);
  const int slices = workspace_slices(s);
  return static_cast<std::size_t>(slices * g.col + (slices - 1) * (s.c_out * g.k + s.c_out));
}

template <class T> void conv2d_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, T* workspace) {
  const Geom g(s);
  const CMatR<T> W(w, s.c_out, g.k);
  for_each_slice(active_slices(s, g), s.n, [&](int slice, int i0, int i1) {
    T* col = workspace + slice * g.col;
    for (int i = i0; i < i1; ++i) {
      MatR<T> Y(y + i * g.y_len, s.c_out, g.hw);
      // Seeding y with the bias lets the GEMM's own `+=` add it for free.
      if (b) {
        Y.colwise() = CVecMap<T>(b, s.c_out);
      } else {
        Y.setZero();
      }
      Y.noalias() += W * columns(s, g, x + i * g.x_len, col);
    }
  });
}

template <class T>
void conv2d_backward_data(T* dx, const T* dy, const T* w, const Conv2dShape& s, T* workspace, bool accumulate) {
  const Geom g(s);
  const auto Wt = CMatR<T>(w, s.c_out, g.k).transpose();
  for_each_slice(active_slices(s, g), s.n, [&](int slice, int i0, int i1) {
    MatR<T> dcol(workspace + slice * g.col, g.k, g.hw);
    for (int i = i0; i < i1; ++i) {
      const CMatR<T> DY(dy + i * g.y_len, s.c_out, g.hw);
      T* dx_i = dx + i * g.x_len;
      if (g.pointwise) {
        assign(MatR<T>(dx_i, s.c_in, g.hw), Wt * DY, accumulate);
        continue;
      }
      dcol.noalias() = Wt * DY;
      if (!accumulate) std::fill(dx_i, dx_i + g.x_len, T(0));
      col2im_add(s, dcol.data(), dx_i);
    }
  });
}

template <class T>
void conv2d_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, T* workspace,
                            bool accumulate) {
  const Geom g(s);
  const std::ptrdiff_t dw_len = s.c_out * g.k;
  const std::ptrdiff_t partial_len = dw_len + s.c_out;
  T* partials = workspace + workspace_slices(s) * g.col;
  const int slices = active_slices(s, g);
  for_each_slice(slices, s.n, [&](int slice, int i0, int i1) {
    T* col = workspace + slice * g.col;
    T* dw_s = slice == 0 ? dw : partials + (slice - 1) * partial_len;
    T* db_s = !db ? nullptr : slice == 0 ? db : dw_s + dw_len;
    bool acc = slice == 0 && accumulate;
    for (int i = i0; i < i1; ++i, acc = true) {
      const CMatR<T> DY(dy + i * g.y_len, s.c_out, g.hw);
      assign(MatR<T>(dw_s, s.c_out, g.k), DY * columns(s, g, x + i * g.x_len, col).transpose(), acc);
      if (db_s) assign(VecMap<T>(db_s, s.c_out), DY.rowwise().sum(), acc);
    }
  });
  for (int slice = 1; slice < slices; ++slice) {
    const T* p = partials + (slice - 1) * partial_len;
    VecMap<T>(dw, dw_len) += CVecMap<T>(p, dw_len);
    if (db) VecMap<T>(db, s.c_out) += CVecMap<T>(p + dw_len, s.c_out);
  }
}

#define CRUMB_INSTANTIATE(T)                                                                               \
  template void conv2d_forward<T>(T*, const T*, const T*, const T*, const Conv2dShape&, T*);             \
  template void conv2d_backward_data<T>(T*, const T*, const T*, const Conv2dShape&, T*, bool);           \
  template void conv2d_backward_weight<T>(T*, T*, const T*, const T*, const Conv2dShape&, T*, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
