// 2-D max and average pooling on NCHW or NHWC tensors of float or 16-bit values (loaded as float, summed in
// float32, stored rounded once): the twins of kernels/cpu/pool.cc. They replace the
// cuDNN pooling wrapper for two reasons:
// - Memory: the engine keeps a 1-byte argmax per output of a max pool for its backward, instead of the
//   pool input. cuDNN's pooling backward needs both x and y, which would keep the input alive until the
//   backward and break the memory plan.
// - Parity: ties go to the first maximum and NaN wins, with the CPU's exact choice of index, so both
//   backends route a gradient to the same cell. cuDNN promises neither rule.
// Every kernel is one thread per element and a gather (no atomics), so results are deterministic, and
// each one adds in the CPU kernel's order (its separable passes: window columns first, then across
// them), so that results equal the CPU's bit for bit; the one caveat is at avg_pool2d_backward_at.
// The per-element work sits in __device__ functions of the flat index, each kernel being a bounds check
// around one of them.
#include <climits>
#include <cstdint>
#include <string>

#include "engine/base/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/pool.h"

namespace crumb::cuda {
namespace {
using detail::blocks_for;
using detail::global_index;
using detail::kBlock;

// Position of flat index i in an [n, c, rows, cols] tensor laid out NCHW or NHWC.
struct Pos {
  std::size_t n;
  int c, row, col;
};

__device__ __forceinline__ Pos split(std::size_t i, int c, int rows, int cols, Layout layout) {
  const std::size_t uc = static_cast<std::size_t>(c), ur = static_cast<std::size_t>(rows),
                    uw = static_cast<std::size_t>(cols);
  if (layout == Layout::NHWC) {
    const std::size_t cell = i / uc, line = cell / uw;  // cell = (n * rows + row) * cols + col
    return {line / ur, static_cast<int>(i % uc), static_cast<int>(line % ur), static_cast<int>(cell % uw)};
  }
  const std::size_t line = i / uw, plane = line / ur;  // plane = n * c + channel
  return {plane / uc, static_cast<int>(plane % uc), static_cast<int>(line % ur), static_cast<int>(i % uw)};
}

// The cells of one (sample, channel) plane of an [n, c, rows, cols] tensor: contiguous in NCHW, one every
// c values in NHWC.
struct Plane {
  std::size_t base, step;
  __device__ __forceinline__ std::size_t at(int row, int col, int cols) const {
    return base + (static_cast<std::size_t>(row) * cols + col) * step;
  }
};

__device__ __forceinline__ Plane plane_of(const Pos& p, int c, int rows, int cols, Layout layout) {
  const std::size_t cells = static_cast<std::size_t>(rows) * cols;
  if (layout == Layout::NHWC) return {p.n * cells * c + p.c, static_cast<std::size_t>(c)};
  return {(p.n * c + p.c) * cells, 1};
}

// The window of output (oh, ow): its top-left corner (h0, w0) in input coordinates, negative inside the
// padding, and the window rows [ki_lo, ki_hi) and columns [kj_lo, kj_hi) that fall on the image. The
// launchers' shape checks make both ranges non-empty.
struct Window {
  int h0, w0;
  int ki_lo, ki_hi, kj_lo, kj_hi;
};

__device__ __forceinline__ Window window_of(const cpu::Pool2dShape& s, int oh, int ow) {
  Window win;
  win.h0 = oh * s.stride_h - s.pad_h;
  win.w0 = ow * s.stride_w - s.pad_w;
  win.ki_lo = win.h0 < 0 ? -win.h0 : 0;
  win.ki_hi = s.h - win.h0 < s.kh ? s.h - win.h0 : s.kh;
  win.kj_lo = win.w0 < 0 ? -win.w0 : 0;
  win.kj_hi = s.w - win.w0 < s.kw ? s.w - win.w0 : s.kw;
  return win;
}

// Half-open range of output positions.
struct Range {
  int lo, hi;
};

// Along one axis, the outputs o in [lo, hi) whose window [o * stride - pad, o * stride - pad + k) covers
// input coordinate i; empty (lo >= hi) where the stride skips i or i is below the last window.
__device__ __forceinline__ Range covering(int i, int k, int stride, int pad, int out) {
  const int padded = i + pad;  // >= 0
  const int lo = padded < k ? 0 : (padded - k) / stride + 1;
  const int last = padded / stride;
  return {lo, last < out ? last + 1 : out};
}

__device__ __forceinline__ bool is_nan(float v) { return v != v; }

// Output i of y [n, c, h_out, w_out] and its argmax, the window offset ki * kw + kj of:
// - a NaN, if the window holds one (NaN wins, as on the CPU and in PyTorch). Of several NaNs, the one
//   the CPU picks: the first in row-major order on its 2x2 / stride-2 / unpadded path (`nan_by_row`),
//   else the first in column-major order (window column, then row), as its separable pass, which
//   reduces each window column first and then the columns in order, keeps the first NaN it meets.
// - else the first maximum in row-major order: only a strictly greater value replaces the running
//   maximum, so ties keep the earlier cell, and the first cell is taken whatever it is (an all -inf
//   window still gets an argmax). Padding cells are never read.
// y holds the winning cell's value itself (a NaN keeps its payload).
template <class T>
__device__ __forceinline__ void max_pool2d_forward_at(std::size_t i, T* __restrict__ y,
                                                      uint8_t* __restrict__ argmax, const T* __restrict__ x,
                                                      const cpu::Pool2dShape& s, bool nan_by_row) {
  const Pos o = split(i, s.c, s.h_out, s.w_out, s.layout);
  const Window win = window_of(s, o.row, o.col);
  const Plane xp = plane_of(o, s.c, s.h, s.w, s.layout);
  float best = 0.0f;
  int at = -1;  // window offset of `best`; -1 before the first cell
  float nan_value = 0.0f;
  int nan_at = -1, nan_rank = INT_MAX;
  for (int ki = win.ki_lo; ki < win.ki_hi; ++ki) {
    for (int kj = win.kj_lo; kj < win.kj_hi; ++kj) {
      const float v = to_float(x[xp.at(win.h0 + ki, win.w0 + kj, s.w)]);
      const int offset = ki * s.kw + kj;
      if (is_nan(v)) {
        const int rank = nan_by_row ? offset : kj * s.kh + ki;
        if (rank < nan_rank) {
          nan_value = v;
          nan_at = offset;
          nan_rank = rank;
        }
      } else if (at < 0 || v > best) {
        best = v;
        at = offset;
      }
    }
  }
  if (nan_at >= 0) {
    best = nan_value;
    at = nan_at;
  }
  y[i] = from_float<T>(best);  // exact: best is one of the window's values
  argmax[i] = static_cast<uint8_t>(at);
}

// Input element i of dx [n, c, h, w]: the sum of dy over the outputs whose window covers the element and
// whose argmax points at it (overlapping windows, stride < kernel, may share a maximum), added onto the
// old dx (accumulate) or onto 0 in the CPU's order, output rows then columns ascending, so the sum is
// the CPU's bit for bit.
template <class T>
__device__ __forceinline__ void max_pool2d_backward_at(std::size_t i, T* __restrict__ dx,
                                                       const T* __restrict__ dy, const uint8_t* __restrict__ argmax,
                                                       const cpu::Pool2dShape& s, bool accumulate) {
  const Pos in = split(i, s.c, s.h, s.w, s.layout);
  const Range rows = covering(in.row, s.kh, s.stride_h, s.pad_h, s.h_out);
  const Range cols = covering(in.col, s.kw, s.stride_w, s.pad_w, s.w_out);
  const Plane out = plane_of(in, s.c, s.h_out, s.w_out, s.layout);
  float sum = accumulate ? to_float(dx[i]) : 0.0f;
  for (int oh = rows.lo; oh < rows.hi; ++oh) {
    const int ki = in.row + s.pad_h - oh * s.stride_h;  // in [0, kh)
    for (int ow = cols.lo; ow < cols.hi; ++ow) {
      const int kj = in.col + s.pad_w - ow * s.stride_w;  // in [0, kw)
      const std::size_t o = out.at(oh, ow, s.w_out);
      if (argmax[o] == ki * s.kw + kj) sum += to_float(dy[o]);
    }
  }
  dx[i] = from_float<T>(sum);
}

// Output i of y [n, c, h_out, w_out]: the window's sum over the image cells (padding counts as zero)
// times 1 / (kh * kw). Summed as the CPU does: each window column top to bottom from 0, then the
// column sums left to right from 0.
template <class T>
__device__ __forceinline__ void avg_pool2d_forward_at(std::size_t i, T* __restrict__ y, const T* __restrict__ x,
                                                      const cpu::Pool2dShape& s, float inv_area) {
  const Pos o = split(i, s.c, s.h_out, s.w_out, s.layout);
  const Window win = window_of(s, o.row, o.col);
  const Plane xp = plane_of(o, s.c, s.h, s.w, s.layout);
  float sum = 0.0f;
  for (int kj = win.kj_lo; kj < win.kj_hi; ++kj) {
    float column = 0.0f;
    for (int ki = win.ki_lo; ki < win.ki_hi; ++ki) column += to_float(x[xp.at(win.h0 + ki, win.w0 + kj, s.w)]);
    sum += column;
  }
  y[i] = from_float<T>(sum * inv_area);
}

// Input element i of dx [n, c, h, w]: sum over the covering windows of dy / (kh * kw), in the CPU's order.
// The CPU spreads each output row of dy over a row of column gradients, window column kj ascending
// (so output column ow descending for a fixed input column), each term dy * inv_area added from 0; then
// adds those column gradients to dx for output rows ascending. The product-add is an fma here: GCC
// contracts the CPU's `col_grad += g * inv_area` into one wherever the target has it (x86-64 with
// -march=native on an FMA machine, aarch64), which makes the two bit-identical there; a CPU build without
// FMA differs in rounding only.
template <class T>
__device__ __forceinline__ void avg_pool2d_backward_at(std::size_t i, T* __restrict__ dx,
                                                       const T* __restrict__ dy, const cpu::Pool2dShape& s,
                                                       float inv_area, bool accumulate) {
  const Pos in = split(i, s.c, s.h, s.w, s.layout);
  const Range rows = covering(in.row, s.kh, s.stride_h, s.pad_h, s.h_out);
  const Range cols = covering(in.col, s.kw, s.stride_w, s.pad_w, s.w_out);
  const Plane out = plane_of(in, s.c, s.h_out, s.w_out, s.layout);
  float sum = accumulate ? to_float(dx[i]) : 0.0f;
  for (int oh = rows.lo; oh < rows.hi; ++oh) {
    float column = 0.0f;
    for (int ow = cols.hi - 1; ow >= cols.lo; --ow)
      column = fmaf(to_float(dy[out.at(oh, ow, s.w_out)]), inv_area, column);
    sum += column;
  }
  dx[i] = from_float<T>(sum);
}

template <class T>
__global__ void max_pool2d_forward_kernel(T* __restrict__ y, uint8_t* __restrict__ argmax,
                                          const T* __restrict__ x, cpu::Pool2dShape s, std::size_t count,
                                          bool nan_by_row) {
  const std::size_t i = global_index();
  if (i < count) max_pool2d_forward_at(i, y, argmax, x, s, nan_by_row);
}

template <class T>
__global__ void max_pool2d_backward_kernel(T* __restrict__ dx, const T* __restrict__ dy,
                                           const uint8_t* __restrict__ argmax, cpu::Pool2dShape s, std::size_t count,
                                           bool accumulate) {
  const std::size_t i = global_index();
  if (i < count) max_pool2d_backward_at(i, dx, dy, argmax, s, accumulate);
}

template <class T>
__global__ void avg_pool2d_forward_kernel(T* __restrict__ y, const T* __restrict__ x, cpu::Pool2dShape s,
                                          std::size_t count, float inv_area) {
  const std::size_t i = global_index();
  if (i < count) avg_pool2d_forward_at(i, y, x, s, inv_area);
}

template <class T>
__global__ void avg_pool2d_backward_kernel(T* __restrict__ dx, const T* __restrict__ dy, cpu::Pool2dShape s,
                                           std::size_t count, float inv_area, bool accumulate) {
  const std::size_t i = global_index();
  if (i < count) avg_pool2d_backward_at(i, dx, dy, s, inv_area, accumulate);
}

std::string describe(const cpu::Pool2dShape& s) {
  return crumb::detail::concat("x [", s.n, ", ", s.c, ", ", s.h, ", ", s.w, "] -> y [", s.n, ", ", s.c, ", ", s.h_out,
                               ", ", s.w_out, "], window ", s.kh, "x", s.kw, " stride ", s.stride_h, "x", s.stride_w,
                               " pad ", s.pad_h, "x", s.pad_w);
}

// Checks the shape as the pooling ops do (engine/ops/pool.cc), which also guarantees that every window
// holds at least one image cell; returns the element counts of x and y. `what` names the launcher.
struct Counts {
  std::size_t in, out;
};

Counts check_shape(const cpu::Pool2dShape& s, const char* what) {
  CRUMB_CHECK(s.n >= 0 && s.c >= 0 && s.h >= 1 && s.w >= 1 && s.kh >= 1 && s.kw >= 1 && s.stride_h >= 1 &&
                  s.stride_w >= 1 && s.pad_h >= 0 && s.pad_w >= 0,
              what, ": bad shape ", describe(s), " (sizes, window and stride must be >= 1, padding >= 0)");
  const long long h_padded = s.h + 2LL * s.pad_h, w_padded = s.w + 2LL * s.pad_w;
  CRUMB_CHECK(2LL * s.pad_h <= s.kh && 2LL * s.pad_w <= s.kw, what, ": ", describe(s),
              ": padding must be at most half the window");
  CRUMB_CHECK(h_padded >= s.kh && w_padded >= s.kw && h_padded <= INT_MAX && w_padded <= INT_MAX, what, ": ",
              describe(s), ": the window must fit the padded input");
  const long long h_out = (h_padded - s.kh) / s.stride_h + 1, w_out = (w_padded - s.kw) / s.stride_w + 1;
  CRUMB_CHECK(s.h_out == h_out && s.w_out == w_out, what, ": ", describe(s), ": the output must have the floor size ",
              h_out, "x", w_out);
  const std::size_t planes = static_cast<std::size_t>(s.n) * static_cast<std::size_t>(s.c);
  return {planes * static_cast<std::size_t>(s.h) * static_cast<std::size_t>(s.w),
          planes * static_cast<std::size_t>(s.h_out) * static_cast<std::size_t>(s.w_out)};
}

void check_argmax_window(const cpu::Pool2dShape& s, const char* what) {
  CRUMB_CHECK(1LL * s.kh * s.kw <= 256, what, ": ", describe(s), ": a window of more than 256 cells overflows the ",
              "1-byte argmax");
}

// Adaptive average pooling, the CPU's loops (kernels/cpu/pool.cc) with one thread per output (forward)
// or input (backward, a gather over the bins holding the cell), in the same order: equal bit for bit.
template <class T>
__global__ void adaptive_avg_pool2d_forward_kernel(T* y, const T* x, cpu::AdaptivePool2dShape s,
                                                   std::size_t count) {
  const std::size_t idx = global_index();
  if (idx >= count) return;
  const Pos p = split(idx, s.c, s.h_out, s.w_out, s.layout);
  const Plane xp = plane_of(p, s.c, s.h, s.w, s.layout);
  const int r0 = cpu::adaptive_begin(p.row, s.h, s.h_out), r1 = cpu::adaptive_end(p.row, s.h, s.h_out);
  const int c0 = cpu::adaptive_begin(p.col, s.w, s.w_out), c1 = cpu::adaptive_end(p.col, s.w, s.w_out);
  float sum = 0.0f;
  for (int r = r0; r < r1; ++r)
    for (int c = c0; c < c1; ++c) sum += to_float(x[xp.at(r, c, s.w)]);
  y[idx] = from_float<T>(sum / static_cast<float>((r1 - r0) * (c1 - c0)));
}

template <class T>
__global__ void adaptive_avg_pool2d_backward_kernel(T* dx, const T* dy, cpu::AdaptivePool2dShape s,
                                                    std::size_t count, bool accumulate) {
  const std::size_t idx = global_index();
  if (idx >= count) return;
  const Pos p = split(idx, s.c, s.h, s.w, s.layout);
  const Plane dyp = plane_of(p, s.c, s.h_out, s.w_out, s.layout);
  const int i0 = cpu::adaptive_first_bin(p.row, s.h, s.h_out), i1 = cpu::adaptive_last_bin(p.row, s.h, s.h_out);
  const int j0 = cpu::adaptive_first_bin(p.col, s.w, s.w_out), j1 = cpu::adaptive_last_bin(p.col, s.w, s.w_out);
  float sum = 0.0f;
  for (int i = i0; i <= i1; ++i) {
    const int rows = cpu::adaptive_end(i, s.h, s.h_out) - cpu::adaptive_begin(i, s.h, s.h_out);
    for (int j = j0; j <= j1; ++j) {
      const int cols = cpu::adaptive_end(j, s.w, s.w_out) - cpu::adaptive_begin(j, s.w, s.w_out);
      sum += to_float(dy[dyp.at(i, j, s.w_out)]) / static_cast<float>(rows * cols);
    }
  }
  detail::put(dx[idx], sum, accumulate);
}

// Elements of x and y, after checking the shape.
Counts check_adaptive(const cpu::AdaptivePool2dShape& s, const char* what) {
  CRUMB_CHECK(s.n >= 0 && s.c >= 0 && s.h >= 1 && s.w >= 1 && s.h_out >= 1 && s.w_out >= 1, what, ": bad shape n=", s.n,
              " c=", s.c, " ", s.h, "x", s.w, " -> ", s.h_out, "x", s.w_out);
  const std::size_t planes = static_cast<std::size_t>(s.n) * s.c;
  return {planes * s.h * s.w, planes * s.h_out * s.w_out};
}

// 1 / (kh * kw) rounded once, then multiplied, as the CPU kernels do.
float inverse_area(const cpu::Pool2dShape& s) { return 1.0f / static_cast<float>(1LL * s.kh * s.kw); }

}  // namespace

template <class T>
void max_pool2d_forward(T* y, uint8_t* argmax, const T* x, const cpu::Pool2dShape& s, cudaStream_t stream) {
  const Counts counts = check_shape(s, "max_pool2d_forward");
  check_argmax_window(s, "max_pool2d_forward");
  if (counts.out == 0) return;
  // The CPU's dispatch to its 2x2 / stride-2 kernel, which orders NaNs differently (see the kernel).
  const bool nan_by_row = s.kh == 2 && s.kw == 2 && s.stride_h == 2 && s.stride_w == 2 && s.pad_h == 0 && s.pad_w == 0;
  max_pool2d_forward_kernel<<<blocks_for(counts.out), kBlock, 0, stream>>>(y, argmax, x, s, counts.out, nan_by_row);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void max_pool2d_backward(T* dx, const T* dy, const uint8_t* argmax, const cpu::Pool2dShape& s, bool accumulate,
                         cudaStream_t stream) {
  const Counts counts = check_shape(s, "max_pool2d_backward");
  check_argmax_window(s, "max_pool2d_backward");
  if (counts.in == 0) return;
  max_pool2d_backward_kernel<<<blocks_for(counts.in), kBlock, 0, stream>>>(dx, dy, argmax, s, counts.in, accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T> void avg_pool2d_forward(T* y, const T* x, const cpu::Pool2dShape& s, cudaStream_t stream) {
  const Counts counts = check_shape(s, "avg_pool2d_forward");
  if (counts.out == 0) return;
  avg_pool2d_forward_kernel<<<blocks_for(counts.out), kBlock, 0, stream>>>(y, x, s, counts.out, inverse_area(s));
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void adaptive_avg_pool2d_forward(T* y, const T* x, const cpu::AdaptivePool2dShape& s, cudaStream_t stream) {
  const Counts counts = check_adaptive(s, "adaptive_avg_pool2d_forward");
  if (counts.out == 0) return;
  adaptive_avg_pool2d_forward_kernel<<<blocks_for(counts.out), kBlock, 0, stream>>>(y, x, s, counts.out);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void adaptive_avg_pool2d_backward(T* dx, const T* dy, const cpu::AdaptivePool2dShape& s, bool accumulate,
                                  cudaStream_t stream) {
  const Counts counts = check_adaptive(s, "adaptive_avg_pool2d_backward");
  if (counts.in == 0) return;
  adaptive_avg_pool2d_backward_kernel<<<blocks_for(counts.in), kBlock, 0, stream>>>(dx, dy, s, counts.in, accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void avg_pool2d_backward(T* dx, const T* dy, const cpu::Pool2dShape& s, bool accumulate, cudaStream_t stream) {
  const Counts counts = check_shape(s, "avg_pool2d_backward");
  if (counts.in == 0) return;
  avg_pool2d_backward_kernel<<<blocks_for(counts.in), kBlock, 0, stream>>>(dx, dy, s, counts.in, inverse_area(s),
                                                                           accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

#define CRUMB_INSTANTIATE(T)                                                                                       \
  template void max_pool2d_forward<T>(T*, uint8_t*, const T*, const cpu::Pool2dShape&, cudaStream_t);              \
  template void max_pool2d_backward<T>(T*, const T*, const uint8_t*, const cpu::Pool2dShape&, bool, cudaStream_t); \
  template void avg_pool2d_forward<T>(T*, const T*, const cpu::Pool2dShape&, cudaStream_t);                        \
  template void avg_pool2d_backward<T>(T*, const T*, const cpu::Pool2dShape&, bool, cudaStream_t);                 \
  template void adaptive_avg_pool2d_forward<T>(T*, const T*, const cpu::AdaptivePool2dShape&, cudaStream_t);       \
  template void adaptive_avg_pool2d_backward<T>(T*, const T*, const cpu::AdaptivePool2dShape&, bool, cudaStream_t);
CRUMB_CUDA_FOR_FLOAT_TYPES(CRUMB_INSTANTIATE)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cuda
