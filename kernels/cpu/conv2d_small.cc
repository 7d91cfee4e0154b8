#include "kernels/cpu/conv2d_small.h"

#include <algorithm>
#include <array>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/ordered_gemm.h"

namespace crumb::cpu::detail {
namespace {

constexpr std::ptrdiff_t kMaxPixels = 16, kMaxBackwardPixels = 49, kMaxCachedWeights = 64 * 1024;
constexpr int kMaxTaps = 64;
// Samples per GEMM column block: the weight gradient's GEMMs run this deep.
constexpr int kChunk = 64;
constexpr std::ptrdiff_t kLanes = 16;
// Columns of one range_forward GEMM at most: wider, its right-hand panel (taps x columns) falls out of
// cache between the row tiles that stream it again.
constexpr std::ptrdiff_t kRangeColumns = 128;

struct Geom {
  std::ptrdiff_t taps, hw_in, hw_out, x_len, y_len;
  int chunk;
  std::ptrdiff_t cols;  // columns of the transposed blocks: chunk rounded up to whole vectors
  explicit Geom(const Conv2dShape& s)
      : taps(std::ptrdiff_t{s.kh} * s.kw),
        hw_in(std::ptrdiff_t{s.h} * s.w),
        hw_out(std::ptrdiff_t{s.h_out} * s.w_out),
        x_len(s.c_in * hw_in),
        y_len(s.c_out * hw_out),
        chunk(std::min(s.n, kChunk)),
        cols((chunk + kLanes - 1) / kLanes * kLanes) {}
};

// f(tap, input pixel) for each kernel tap of output pixel p that lands inside the image, in tap order.
template <class F> void for_each_tap(const Conv2dShape& s, std::ptrdiff_t p, F&& f) {
  const int oh = static_cast<int>(p / s.w_out), ow = static_cast<int>(p % s.w_out);
  for (int ki = 0; ki < s.kh; ++ki) {
    const int ih = oh * s.stride_h - s.pad_h + ki;
    if (ih < 0 || ih >= s.h) continue;
    for (int kj = 0; kj < s.kw; ++kj) {
      const int iw = ow * s.stride_w - s.pad_w + kj;
      if (iw >= 0 && iw < s.w) f(ki * s.kw + kj, std::ptrdiff_t{ih} * s.w + iw);
    }
  }
}

// for_each_tap in the form pixel_gemm(s) take: the taps of output pixel p that land inside the image.
inline auto taps_inside(const Conv2dShape& s) {
  return [&s](std::ptrdiff_t p, auto&& add) { for_each_tap(s, p, add); };
}

// Samples [0, count) of len elements each -> rows of `cols` columns (row k holds element k of every
// sample); the columns past count are zeroed so that sums over whole rows add nothing for them.
template <class T> void to_columns(T* out, const T* src, int count, std::ptrdiff_t len, std::ptrdiff_t cols) {
  for (std::ptrdiff_t k = 0; k < len; ++k) {
    T* row = out + k * cols;
    for (int j = 0; j < count; ++j) row[j] = src[j * len + k];
    std::fill(row + count, row + cols, T(0));
  }
}

template <class T>
void from_columns(T* dst, const T* in, int count, std::ptrdiff_t len, std::ptrdiff_t cols, bool accumulate) {
  with_write_mode(accumulate, [&](auto acc) {
    for (int j = 0; j < count; ++j)
      for (std::ptrdiff_t k = 0; k < len; ++k) put(acc, dst[j * len + k], in[k * cols + j]);
  });
}

bool same_size(const Conv2dShape& s) {
  return s.stride_h == 1 && s.stride_w == 1 && s.h_out == s.h && s.w_out == s.w;
}

}  // namespace

bool conv2d_small(const Conv2dShape& s) {
  return std::ptrdiff_t{s.h_out} * s.w_out <= kMaxPixels && s.kh * s.kw <= kMaxTaps;
}

// Up to 7x7 (ResNet-20's last stage, ResNet-18's first, on 28x28 inputs) a 3x3 kernel still skips a
// fifth of its taps, and tiles as wide as the samples beat the direct path's padded rows (7 of 9
// columns useful, 64-wide grids in 32-wide tiles) once a slice has a few vectors of samples: at
// 7x7x64, batch 128 on 2 threads, data gradient 3.6 -> 2.2 ms, weight 4.9 -> 2.7 (kernels_bench
// --suites=resnet20_28). With a few samples the tiles run mostly empty (ResNet-20 at micro-batches of
// 8 trained 10-25% slower with every pass here), so the backward passes take this path only in slices
// of kSmallBackwardSamples; the forward must not depend on n, and takes it only where range_forward
// fills the tiles whatever the count. 1x1 kernels skip nothing. Every pixel's GEMM streams the whole
// weight matrix for one chunk of samples, so only while the weights stay in cache (ResNet-50's 7x7x512
// layer4 at batch 8 ran 6x slower this way).
bool conv2d_small_backward(const Conv2dShape& s) {
  return s.kh * s.kw > 1 && s.kh * s.kw <= kMaxTaps &&
         std::ptrdiff_t{s.c_out} * s.c_in * s.kh * s.kw <= kMaxCachedWeights &&
         std::ptrdiff_t{s.h_out} * s.w_out <= kMaxBackwardPixels;
}

// The forward of a stride-1 convolution that keeps the map's size reads input pixel p + offset[tap]
// for output pixel p wherever the tap lands inside: one GEMM covers a whole range of pixels, rows
// included, with the samples of a chunk as the inner columns (range_forward), so its tiles fill
// however few samples a thread has.
bool conv2d_small_forward(const Conv2dShape& s) {
  return conv2d_small(s) || (same_size(s) && conv2d_small_backward(s));
}

std::ptrdiff_t small_slice_len(const Conv2dShape& s) {
  const Geom g(s);
  return (g.x_len + g.y_len) * g.cols;
}

namespace {
// Each tap's block in the weight gradient's sums over the live taps (-1: no output pixel reads it), and
// how many are live.
struct LiveTaps {
  std::array<std::ptrdiff_t, kMaxTaps> slot;
  std::ptrdiff_t live = 0;
  explicit LiveTaps(const Conv2dShape& s) {
    slot.fill(-1);
    const std::ptrdiff_t block = std::ptrdiff_t{s.c_out} * s.c_in, hw_out = std::ptrdiff_t{s.h_out} * s.w_out;
    for (std::ptrdiff_t p = 0; p < hw_out; ++p)
      for_each_tap(s, p, [&](int t, std::ptrdiff_t) {
        if (slot[t] < 0) slot[t] = live++ * block;
      });
  }
};
}  // namespace

std::ptrdiff_t small_taps_len(const Conv2dShape& s) { return LiveTaps(s).live * s.c_out * s.c_in; }

std::ptrdiff_t small_weight_slice_len(const Conv2dShape& s) { return small_slice_len(s) + small_taps_len(s); }

// One side of a pass: per sample `channels` planes of `pixels` values.
struct Side {
  int channels;
  std::ptrdiff_t pixels;
  std::ptrdiff_t len() const { return channels * pixels; }
};

// Output pixel p's GEMM over the (tap, input pixel) pairs taps_of lists for it, on transposed blocks of
// `cols` columns per pixel: out_t[:, p] = init + lhs[:, (channel, tap) at channel * lhs_group + tap] *
// in_t[(channel, input pixel)].
template <class T, class TapsOf>
void pixel_gemm(T* out_t, const Side& out_side, const T* in_t, const Side& in_side, const T* lhs, std::ptrdiff_t ldl,
                std::ptrdiff_t lhs_group, const T* init, std::ptrdiff_t cols, std::ptrdiff_t p, TapsOf& taps_of) {
  std::array<std::ptrdiff_t, kMaxTaps> lhs_tap{}, in_row{};
  int pairs = 0;
  taps_of(p, [&](int t, std::ptrdiff_t in_pixel) {
    lhs_tap[pairs] = t;
    in_row[pairs++] = in_pixel * cols;
  });
  const LhsCols lhs_cols{lhs_group, lhs_tap.data()};
  const RhsRows<T> rhs{in_t, in_side.pixels * cols, in_row.data(), pairs, in_side.channels};
  ordered_gemm(out_t + p * cols, out_side.pixels * cols, lhs, ldl, &lhs_cols, rhs, out_side.channels, cols, init);
}

// The forward pass and the data gradient alike: chunks of samples of `in` transposed, one ordered GEMM
// per pixel of `out` (rows: its channels; depth: in's channels x the pairs taps_of lists for the pixel,
// lhs column (channel, tap) at channel * lhs_group + tap), transposed back into out (=|+=).
template <class T, class TapsOf>
void pixel_gemms(T* out, const Side& out_side, const T* in, const Side& in_side, const T* lhs, std::ptrdiff_t ldl,
                 std::ptrdiff_t lhs_group, const T* init, const Geom& g, int i0, int i1, T* ws, bool accumulate,
                 TapsOf&& taps_of) {
  T* in_t = ws;
  T* out_t = ws + in_side.len() * g.cols;
  for (int i = i0; i < i1; i += g.chunk) {
    const int count = std::min(g.chunk, i1 - i);
    to_columns(in_t, in + i * in_side.len(), count, in_side.len(), g.cols);
    for (std::ptrdiff_t p = 0; p < out_side.pixels; ++p)
      pixel_gemm(out_t, out_side, in_t, in_side, lhs, ldl, lhs_group, init, g.cols, p, taps_of);
    from_columns(out + i * out_side.len(), out_t, count, out_side.len(), g.cols, accumulate);
  }
}

// The forward of a same-size stride-1 map past 4x4: the chunk transposed with exactly `count` columns
// per pixel, then the pixels whose every tap lands inside (from the first to the last, with the
// border pixels between them computed on the way and dropped) as GEMMs of up to kRangeColumns
// columns, reading input pixel p + offset[tap]; then each border pixel over its own taps, as
// pixel_gemms does. Every entry is the same fma sequence whatever count or the GEMM it falls in.
template <class T>
void range_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, int i0, int i1, T* ws) {
  const Geom g(s);
  T* in_t = ws;
  T* out_t = ws + g.x_len * g.cols;
  const int oh0 = s.pad_h, oh1 = s.h - s.kh + s.pad_h, ow0 = s.pad_w, ow1 = s.w - s.kw + s.pad_w;
  const bool interior = oh0 <= oh1 && ow0 <= ow1;
  const std::ptrdiff_t p0 = std::ptrdiff_t{oh0} * s.w + ow0, p1 = std::ptrdiff_t{oh1} * s.w + ow1;
  std::array<std::ptrdiff_t, kMaxTaps> offset{}, in_row{};
  for (int ki = 0; ki < s.kh; ++ki)
    for (int kj = 0; kj < s.kw; ++kj) offset[ki * s.kw + kj] = std::ptrdiff_t{ki - s.pad_h} * s.w + (kj - s.pad_w);
  const int taps = static_cast<int>(g.taps);
  const std::ptrdiff_t ldl = s.c_in * g.taps;
  const Side out_side{s.c_out, g.hw_out}, in_side{s.c_in, g.hw_in};
  auto taps_of = taps_inside(s);
  for (int i = i0; i < i1; i += g.chunk) {
    const int count = std::min(g.chunk, i1 - i);
    const std::ptrdiff_t plane = g.hw_in * count, per = std::max<std::ptrdiff_t>(1, kRangeColumns / count);
    to_columns(in_t, x + i * g.x_len, count, g.x_len, count);
    for (std::ptrdiff_t q = p0; interior && q <= p1; q += per) {
      for (int t = 0; t < taps; ++t) in_row[t] = (q + offset[t]) * count;
      const RhsRows<T> rhs{in_t, plane, in_row.data(), taps, s.c_in};
      ordered_gemm(out_t + q * count, plane, w, ldl, nullptr, rhs, s.c_out, std::min(per, p1 + 1 - q) * count, b);
    }
    for (std::ptrdiff_t p = 0; p < g.hw_out; ++p) {
      const int oh = static_cast<int>(p / s.w), ow = static_cast<int>(p % s.w);
      if (oh < oh0 || oh > oh1 || ow < ow0 || ow > ow1)
        pixel_gemm(out_t, out_side, in_t, in_side, w, ldl, g.taps, b, count, p, taps_of);
    }
    from_columns(y + i * g.y_len, out_t, count, g.y_len, count, false);
  }
}

// y[:, co, p] = b + sum over the taps of p inside the image: W[co, :, tap] . x[:, :, pixel].
template <class T>
void small_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, int i0, int i1, T* ws) {
  if (!conv2d_small(s)) return range_forward(y, x, w, b, s, i0, i1, ws);
  const Geom g(s);
  pixel_gemms(y, Side{s.c_out, g.hw_out}, x, Side{s.c_in, g.hw_in}, w, s.c_in * g.taps, g.taps, b, g, i0, i1, ws,
              false, taps_inside(s));
}

// dx[:, ci, q] = sum over the (output pixel p, tap) pairs that read input pixel q: W[:, ci, tap] .
// dy[:, :, p].
template <class T>
void small_backward_data(T* dx, const T* dy, const T* w, const Conv2dShape& s, int i0, int i1, T* ws, bool accumulate) {
  const Geom g(s);
  pixel_gemms(dx, Side{s.c_in, g.hw_in}, dy, Side{s.c_out, g.hw_out}, w, g.taps, s.c_in * g.taps,
              static_cast<const T*>(nullptr), g, i0, i1, ws, accumulate, [&](std::ptrdiff_t q, auto&& add) {
                for (std::ptrdiff_t p = 0; p < g.hw_out; ++p)
                  for_each_tap(s, p, [&](int t, std::ptrdiff_t in) {
                    if (in == q) add(t, p);
                  });
              });
}

// by_tap[slot(tap)] = sum over output pixels p and their taps inside the image (reading input pixel q) of
// dy[:, :, p] . x[:, :, q]^T over the samples: Eigen GEMMs as deep as the chunk. Only the live taps get a
// block: zeroing and permuting the others' would cost more than the GEMMs.
template <class T>
void small_weight_taps(T* by_tap, T* db, const T* dy, const T* x, const Conv2dShape& s, int i0, int i1, T* ws,
                       bool accumulate_db) {
  using Strided = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>>;
  const Geom g(s);
  const LiveTaps taps(s);
  T* xt = ws;
  T* dyt = xt + g.x_len * g.cols;
  std::fill(by_tap, by_tap + taps.live * s.c_out * s.c_in, T(0));
  if (db && !accumulate_db) std::fill(db, db + s.c_out, T(0));
  for (int i = i0; i < i1; i += g.chunk) {
    const int count = std::min(g.chunk, i1 - i);
    to_columns(xt, x + i * g.x_len, count, g.x_len, g.cols);
    to_columns(dyt, dy + i * g.y_len, count, g.y_len, g.cols);
    for (std::ptrdiff_t p = 0; p < g.hw_out; ++p) {
      const Strided DY(dyt + p * g.cols, s.c_out, g.cols, Eigen::OuterStride<>(g.hw_out * g.cols));
      for_each_tap(s, p, [&](int t, std::ptrdiff_t q) {
        const Strided X(xt + q * g.cols, s.c_in, g.cols, Eigen::OuterStride<>(g.hw_in * g.cols));
        gemm(MatR<T>(by_tap + taps.slot[t], s.c_out, s.c_in), DY, X.transpose(), true);
      });
    }
    if (db)
      for (int co = 0; co < s.c_out; ++co)
        db[co] += CVecMap<T>(dyt + co * g.hw_out * g.cols, g.hw_out * g.cols).sum();
  }
}

// dw is [c_out, c_in, taps]: on a 1x1 map 8 of 9 entries are zeros (their gradient; += leaves them), so
// this is a stream of dw's size, threaded, in pieces that stay in L1 while each live tap's entries go in.
template <class T> void small_weight_store(T* dw, const T* by_tap, const Conv2dShape& s, bool accumulate) {
  constexpr std::ptrdiff_t kPiece = 256;
  const LiveTaps taps(s);
  const std::ptrdiff_t block = std::ptrdiff_t{s.c_out} * s.c_in, n_taps = std::ptrdiff_t{s.kh} * s.kw;
  parallel_ranges(block, static_cast<double>(block * n_taps), [&](std::ptrdiff_t k0, std::ptrdiff_t k1) {
    with_write_mode(accumulate, [&](auto acc) {
      for (std::ptrdiff_t p0 = k0; p0 < k1; p0 += kPiece) {
        const std::ptrdiff_t p1 = std::min(k1, p0 + kPiece);
        if (!accumulate && taps.live < n_taps) std::fill(dw + p0 * n_taps, dw + p1 * n_taps, T(0));
        for (std::ptrdiff_t t = 0; t < n_taps; ++t) {
          if (taps.slot[t] < 0) continue;
          const T* from = by_tap + taps.slot[t];
          for (std::ptrdiff_t k = p0; k < p1; ++k) put(acc, dw[k * n_taps + t], load(from[k]));
        }
      }
    });
  });
}

template <class T>
void small_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, int i0, int i1, T* ws,
                           bool accumulate) {
  T* by_tap = ws + small_slice_len(s);
  small_weight_taps(by_tap, db, dy, x, s, i0, i1, ws, accumulate);
  small_weight_store(dw, by_tap, s, accumulate);
}

#define CRUMB_INSTANTIATE(T)                                                                               \
  template void small_forward<T>(T*, const T*, const T*, const T*, const Conv2dShape&, int, int, T*);     \
  template void small_backward_data<T>(T*, const T*, const T*, const Conv2dShape&, int, int, T*, bool);   \
  template void small_backward_weight<T>(T*, T*, const T*, const T*, const Conv2dShape&, int, int, T*, bool);  \
  template void small_weight_taps<T>(T*, T*, const T*, const T*, const Conv2dShape&, int, int, T*, bool);      \
  template void small_weight_store<T>(T*, const T*, const Conv2dShape&, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu::detail
