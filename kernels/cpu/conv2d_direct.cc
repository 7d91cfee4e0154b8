#include "kernels/cpu/conv2d_direct.h"

#include <algorithm>
#include <array>

#include "kernels/cpu/dot_gemm.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/ordered_gemm.h"

namespace crumb::cpu::detail {
namespace {

// Up to 8x8 kernels: the tap offsets live on the stack.
constexpr int kMaxTaps = 64;
// Elements one 64-byte vector holds at most (floats): the weight-gradient tiles read dy in whole
// vectors, so its rows are padded to this.
constexpr std::ptrdiff_t kLanes = 16;
// Below this many output pixels per channel the padded width wastes too many lanes (a 4x4 map computes
// 4x6) and conv2d.cc's blocks of samples do better.
constexpr std::ptrdiff_t kMinPixels = 49, kMinStridedPixels = 128;

std::ptrdiff_t round_up(std::ptrdiff_t v, std::ptrdiff_t to) { return (v + to - 1) / to * to; }

// c planes of an h x w image inside zero borders (top, left; hp x wp in all), each split into sh x sw
// phase planes of hq x wq: padded pixel (R, J) lies in phase (R % sh, J % sw) at row R / sh, column
// J / sw. A stride-sh, sw convolution is then a stride-1 correlation over the phases (tap (ki, kj)
// reads phase (ki % sh, kj % sw) from (ki / sh, kj / sw) on); with stride 1 there is one phase, the
// padded plane itself. Reads run past the last plane by less than a kernel width plus a vector.
struct Padded {
  int c, h, w, top, left, hp, wp, sh, sw, kw;
  int hq() const { return (hp + sh - 1) / sh; }
  int wq() const { return (wp + sw - 1) / sw; }
  std::ptrdiff_t plane() const { return std::ptrdiff_t{hq()} * wq(); }
  std::ptrdiff_t channel() const { return sh * sw * plane(); }
  std::ptrdiff_t len() const { return c * channel() + kw + kLanes; }
};

// The three passes as one correlation: `in` holds the image the kernel slides over, `out_rows` x
// in.wq() the grid of outputs (the columns past the real output width are dropped).
struct Pass {
  Padded in;
  int out_rows;
  std::ptrdiff_t grid() const { return std::ptrdiff_t{out_rows} * in.wq(); }
  // Grid rows are computed in whole vectors: on a 7x7 map (63 grid columns) narrower tail tiles would
  // cost as much as the rest.
  std::ptrdiff_t ld() const { return round_up(grid(), kLanes); }
};

// Forward and weight gradient slide over x padded by the convolution's own padding.
Pass over_x(const Conv2dShape& s) {
  return {{s.c_in, s.h, s.w, s.pad_h, s.pad_w, s.h + 2 * s.pad_h, s.w + 2 * s.pad_w, s.stride_h, s.stride_w, s.kw},
          s.h_out};
}

// The data gradient (stride 1 only) is the full correlation of dy with the flipped kernel: dy padded by
// kernel - 1 - pad on each side, h x w outputs.
Pass over_dy(const Conv2dShape& s) {
  const int top = s.kh - 1 - s.pad_h, left = s.kw - 1 - s.pad_w;
  return {{s.c_out, s.h_out, s.w_out, top, left, s.h_out + 2 * top, s.w_out + 2 * left, 1, 1, s.kw}, s.h};
}

// Where tap (ki, kj) of a kh x kw kernel starts within a channel of in.
std::array<std::ptrdiff_t, kMaxTaps> tap_offsets(const Conv2dShape& s, const Padded& in) {
  std::array<std::ptrdiff_t, kMaxTaps> tap{};
  for (int ki = 0; ki < s.kh; ++ki)
    for (int kj = 0; kj < s.kw; ++kj)
      tap[ki * s.kw + kj] = ((ki % in.sh) * in.sw + kj % in.sw) * in.plane() + std::ptrdiff_t{ki / in.sh} * in.wq() +
                            kj / in.sw;
  return tap;
}

// Copies sample src (c x h x w) into the interior of p; the borders stay as they are (zero). Locals
// only in the row loops: a row is a few dozen elements, so reloading g's fields or dividing per row
// would cost as much as the copy.
template <class T> void fill_interior(T* p, const T* src, const Padded& g) {
  const int h = g.h, w = g.w, sh = g.sh, sw = g.sw;
  const std::ptrdiff_t rows = std::ptrdiff_t{g.c} * h, plane = g.plane(), wq = g.wq();
  if (sh == 1 && sw == 1) {
    T* d = p + std::ptrdiff_t{g.top} * wq + g.left;
    const std::ptrdiff_t skip = (g.hq() - h) * wq;  // the bottom and top borders between channels
    for (std::ptrdiff_t r = 0; r < rows; ++r, src += w, d += wq) {
      copy_short(d, src, w);
      if ((r + 1) % h == 0) d += skip;
    }
    return;
  }
  for (int ch = 0; ch < g.c; ++ch)
    for (int r = 0; r < h; ++r, src += w) {
      const int pr = r + g.top;
      T* phases = p + ch * g.channel() + (pr % sh) * sw * plane + std::ptrdiff_t{pr / sh} * wq;
      for (int b = 0; b < sw; ++b) {  // the columns of phase b: padded columns b, b + sw, ...
        const int j0 = ((b - g.left) % sw + sw) % sw;
        T* d = phases + b * plane + (j0 + g.left) / sw;
        for (int j = j0; j < w; j += sw) *d++ = src[j];
      }
    }
}

// dst (c x rows x w, dense) (=|+=) the first w columns of each grid row (c grids of rows x wp, ld apart).
template <class T> void store_grid(T* dst, const T* grid, int c, int rows, int w, const Pass& pass, bool accumulate) {
  for (std::ptrdiff_t r = 0; r < std::ptrdiff_t{c} * rows; ++r) {
    const T* src = grid + r / rows * pass.ld() + r % rows * pass.in.wq();
    T* d = dst + r * w;
    if (accumulate) {
      for (int j = 0; j < w; ++j) d[j] += src[j];
    } else {
      copy_short(d, src, w);
    }
  }
}

// Samples [i0, i1) of `in` (pass.in's image) each copied into zero-padded planes, then one implicit
// GEMM: grid[m, in.wq() * out_rows] = init + lhs[m, in.c * taps] * the column matrix read out of them,
// whose first out_w columns of each row go to `out` (=|+=).
template <class T>
void correlate(T* out, int out_w, const T* in, const T* lhs, int m, const T* init, const Pass& pass,
               const Conv2dShape& s, int i0, int i1, T* ws, bool accumulate) {
  T* padded = ws;
  T* grid = ws + pass.in.len();
  std::fill(padded, grid, T(0));
  const auto tap = tap_offsets(s, pass.in);
  const RhsRows<T> rhs{padded, pass.in.channel(), tap.data(), s.kh * s.kw, pass.in.c};
  const std::ptrdiff_t in_len = std::ptrdiff_t{pass.in.c} * pass.in.h * pass.in.w,
                       out_len = std::ptrdiff_t{m} * pass.out_rows * out_w;
  for (int i = i0; i < i1; ++i) {
    fill_interior(padded, in + i * in_len, pass.in);
    ordered_gemm(grid, pass.ld(), lhs, std::ptrdiff_t{pass.in.c} * s.kh * s.kw, nullptr, rhs, m, pass.ld(), init);
    store_grid(out + i * out_len, grid, m, pass.out_rows, out_w, pass, accumulate);
  }
}

// Samples per chunk of the weight gradient. Each chunk ends in a lane sum of every tile's accumulators,
// about as costly as 16 pixels of depth per entry, so a chunk runs at least kMinChunkPixels deep
// (ResNet-50's 7x7x512 layers at 1 sample per chunk took twice as long). Past that it grows up to
// kChunkPixels while its padded planes and dy grids, which the tiles re-read once per row block, stay
// within kChunkBytes (half of a 1 MiB L2): resnet20's 28x28x16 and 14x14x32 weight passes 17-21%
// faster than at 1024 pixels.
int weight_chunk(const Conv2dShape& s) {
  constexpr std::ptrdiff_t kMinChunkPixels = 1024, kChunkPixels = 4096, kChunkBytes = 512 << 10, kMaxChunk = 32;
  const Pass pass = over_x(s);
  const std::ptrdiff_t n = pass.ld(), bytes = (pass.in.len() + s.c_out * n) * std::ptrdiff_t{sizeof(float)};
  const std::ptrdiff_t chunk = std::max(kMinChunkPixels / n, std::min(kChunkPixels / n, kChunkBytes / bytes));
  return static_cast<int>(std::clamp<std::ptrdiff_t>(chunk, 1, std::min<std::ptrdiff_t>(kMaxChunk, s.n)));
}

}  // namespace

bool conv2d_direct(const Conv2dShape& s) {
  const bool strided = s.stride_h > 1 || s.stride_w > 1;
  // A strided 1x1 convolution reads one phase of the several it would fill; im2col gathers just that.
  // Strided maps under kMinStridedPixels lose more to the phase copies and the wider padded rows than
  // the im2col path's blocks of samples do.
  return s.kh * s.kw > 1 && s.kh * s.kw <= kMaxTaps && s.pad_h < s.kh && s.pad_w < s.kw &&
         std::ptrdiff_t{s.h_out} * s.w_out >= (strided ? kMinStridedPixels : kMinPixels);
}

bool conv2d_direct_data(const Conv2dShape& s) { return conv2d_direct(s) && s.stride_h == 1 && s.stride_w == 1; }

std::ptrdiff_t direct_slice_len(const Conv2dShape& s, ConvPass pass) {
  const Pass x = over_x(s);
  switch (pass) {
    case ConvPass::Forward: return x.in.len() + s.c_out * x.ld();
    case ConvPass::Data: {
      const Pass dy = over_dy(s);
      return dy.in.len() + s.c_in * dy.ld();
    }
    case ConvPass::Weight: break;
  }
  return weight_chunk(s) * (x.in.len() + s.c_out * x.ld());
}

std::ptrdiff_t direct_shared_len(const Conv2dShape& s) { return std::ptrdiff_t{s.c_in} * s.c_out * s.kh * s.kw; }

template <class T>
void direct_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, int i0, int i1, T* ws) {
  correlate(y, s.w_out, x, w, s.c_out, b, over_x(s), s, i0, i1, ws, false);
}

// wf[ci, co, a, b] = w[co, ci, kh - 1 - a, kw - 1 - b]: the data gradient's GEMM has input channels as
// rows and (output channel, flipped tap) as its depth.
template <class T> void direct_flip_weights(T* wf, const T* w, const Conv2dShape& s) {
  const std::ptrdiff_t taps = std::ptrdiff_t{s.kh} * s.kw;
  for (int co = 0; co < s.c_out; ++co)
    for (int ci = 0; ci < s.c_in; ++ci)
      for (std::ptrdiff_t t = 0; t < taps; ++t)
        wf[(std::ptrdiff_t{ci} * s.c_out + co) * taps + (taps - 1 - t)] = w[(std::ptrdiff_t{co} * s.c_in + ci) * taps + t];
}

template <class T>
void direct_backward_data(T* dx, const T* dy, const T* wf, const Conv2dShape& s, int i0, int i1, T* ws,
                          bool accumulate) {
  correlate(dx, s.w, dy, wf, s.c_in, static_cast<const T*>(nullptr), over_dy(s), s, i0, i1, ws, accumulate);
}

template <class T>
void direct_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, int i0, int i1, T* ws,
                            bool accumulate) {
  const Pass pass = over_x(s);
  const int chunk = weight_chunk(s);
  // Per sample of the chunk: its padded planes, then dy on the padded grid (zero in the dropped
  // columns and the rounding tail, so they add nothing); one step apart in both (dot_gemm's Segments).
  const std::ptrdiff_t n = pass.ld(), step = pass.in.len() + s.c_out * n;
  T* padded = ws;
  T* dy_grid = ws + pass.in.len();
  std::fill(ws, ws + chunk * step, T(0));
  const std::ptrdiff_t k = std::ptrdiff_t{s.c_in} * s.kh * s.kw;
  if (!accumulate) {
    std::fill(dw, dw + s.c_out * k, T(0));
    if (db) std::fill(db, db + s.c_out, T(0));
  }
  const auto tap = tap_offsets(s, pass.in);
  const RhsRows<T> rhs{padded, pass.in.channel(), tap.data(), s.kh * s.kw, s.c_in};
  const std::ptrdiff_t hw = std::ptrdiff_t{s.h_out} * s.w_out;
  for (int i = i0; i < i1; i += chunk) {
    const int count = std::min(chunk, i1 - i);
    for (int j = 0; j < count; ++j) {
      fill_interior(padded + j * step, x + std::ptrdiff_t{i + j} * s.c_in * s.h * s.w, pass.in);
      const T* dy_j = dy + (i + j) * s.c_out * hw;
      for (int co = 0; co < s.c_out; ++co) {
        for (int r = 0; r < s.h_out; ++r) {
          copy_short(dy_grid + j * step + co * n + std::ptrdiff_t{r} * pass.in.wq(),
                     dy_j + co * hw + std::ptrdiff_t{r} * s.w_out, s.w_out);
        }
        if (db) db[co] += lane_sum(dy_j + co * hw, hw);
      }
    }
    dot_gemm(dw, dy_grid, n, rhs, s.c_out, Segments{n, count, step});
  }
}

#define CRUMB_INSTANTIATE(T)                                                                                \
  template void direct_forward<T>(T*, const T*, const T*, const T*, const Conv2dShape&, int, int, T*);     \
  template void direct_flip_weights<T>(T*, const T*, const Conv2dShape&);                                  \
  template void direct_backward_data<T>(T*, const T*, const T*, const Conv2dShape&, int, int, T*, bool);   \
  template void direct_backward_weight<T>(T*, T*, const T*, const T*, const Conv2dShape&, int, int, T*, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu::detail
