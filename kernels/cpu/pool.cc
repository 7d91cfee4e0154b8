#include <algorithm>
#include <cassert>
#include <limits>
#include <type_traits>

// The 2x2 / 2 max pool's AVX-512 rows (byte loads and stores need BW and VL, as x86-64-v4 has).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define CRUMB_POOL_AVX512 1
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics read _mm512_undefined_* values, which -Wmaybe-uninitialized reports.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

#include "kernels/cpu/kernel_util.h"
#include "kernels/pool.h"

namespace crumb::cpu {
namespace {
using detail::kParallelGrain;
using detail::load;
using detail::put;
using detail::store;
using detail::Range;
using detail::valid_range;
using detail::with_write_mode;

// Pooling is separable: a window's max (or sum) is the max over its columns of each column's max
// over the window rows. Each plane is processed in bands of output rows: a vertical pass reduces
// the window rows of every output row to one band row (contiguous runs of a whole input row), then
// a horizontal pass reduces each window's columns. Both passes are branch-free loops over runs, so
// they vectorise; for non-overlapping, unpadded pools (2x2 / 2) the horizontal pass is a single
// run over the band. A per-window scan would instead pay a mispredicted branch on most compares.

// Elements of each per-band buffer on the stack.
constexpr int kBandBuffer = kMaxPoolWidth;

std::ptrdiff_t in_plane(const Pool2dShape& s) { return std::ptrdiff_t{s.h} * s.w; }
std::ptrdiff_t out_plane(const Pool2dShape& s) { return std::ptrdiff_t{s.h_out} * s.w_out; }

// Runs f(plane, stride_w) for every (sample, channel) plane, with the common column strides as
// compile-time constants so that strided reads vectorise as loads + permutes rather than gathers.
// Planes are independent, so they split across threads without write conflicts.
template <class F> void for_each_plane(const Pool2dShape& s, F&& f) {
  const std::ptrdiff_t planes = std::ptrdiff_t{s.n} * s.c;
  auto run = [&](auto stride_w) {
#pragma omp parallel for schedule(static) if (planes * in_plane(s) > kParallelGrain)
    for (std::ptrdiff_t p = 0; p < planes; ++p) f(p, stride_w);
  };
  if (s.stride_w == 1) {
    run(std::integral_constant<int, 1>{});
  } else if (s.stride_w == 2) {
    run(std::integral_constant<int, 2>{});
  } else {
    run(s.stride_w);
  }
}

// Output rows [oh0, oh1) of a plane; band buffers hold one row of w (vertical pass) or w_out
// (horizontal pass) elements per output row.
struct Band {
  int oh0, oh1;
  int rows() const { return oh1 - oh0; }
};

template <class F> void for_each_band(const Pool2dShape& s, F&& f) {
  const int width = std::max(s.w, s.w_out);
  assert(width <= kBandBuffer && "pooling rows too wide for the band buffers");
  const int step = kBandBuffer / width;
  for (int oh0 = 0; oh0 < s.h_out; oh0 += step) f(Band{oh0, std::min(oh0 + step, s.h_out)});
}

// The tap loops below take their bodies by value, and the bodies capture plain pointers by value:
// captures by reference are reloaded through memory on every iteration, which turns the vectorised
// loops into gathers.

// Vertical taps: calls tap(q, i) for each output row oh of the band, window row inside the image
// and input column, where q = (oh - oh0) * w + column indexes the band buffer and i the plane.
template <class F> void for_each_col_tap(const Pool2dShape& s, const Band& b, F tap) {
  for (int oh = b.oh0; oh < b.oh1; ++oh) {
    const int q0 = (oh - b.oh0) * s.w;
    for (int ki = 0; ki < s.kh; ++ki) {
      const int ih = oh * s.stride_h - s.pad_h + ki;
      if (ih < 0 || ih >= s.h) continue;
      const int i0 = ih * s.w;
#pragma omp simd
      for (int iw = 0; iw < s.w; ++iw) tap(q0 + iw, i0 + iw);
    }
  }
}

// Horizontal taps: calls tap(o, q) for each output o = (oh - oh0) * w_out + ow of the band and each
// window column inside the image, q indexing the band buffer. Within one window column the (o, q)
// pairs are distinct, so tap bodies may scatter.
template <class Stride, class F> void for_each_row_tap(const Pool2dShape& s, const Band& b, Stride stride_w, F tap) {
  const bool flat = s.pad_w == 0 && s.kw <= stride_w && s.w == s.w_out * stride_w;
  for (int kj = 0; kj < s.kw; ++kj) {
    if (flat) {
      const int end = b.rows() * s.w_out;
#pragma omp simd
      for (int o = 0; o < end; ++o) tap(o, o * stride_w + kj);
      continue;
    }
    const Range r = valid_range(kj, stride_w, s.pad_w, s.w, s.w_out);
    for (int row = 0; row < b.rows(); ++row) {
      const int o0 = row * s.w_out;
      const int q0 = row * s.w - s.pad_w + kj;
#pragma omp simd
      for (int ow = r.lo; ow < r.hi; ++ow) tap(o0 + ow, q0 + ow * stride_w);
    }
  }
}

// Running max with the plane index of its first occurrence; NaN wins, as in PyTorch, so a diverged
// activation is not hidden. Ties go to the smaller plane index,
// which is the first in row-major window order. kAscending: the taps come in ascending index order,
// so a tie never wins. `at` < 0 marks the empty state (-inf), which takes anything, so even an all
// -inf window has an argmax.
template <bool kAscending, class T> void keep_max(T& best, int& at, T v, int i) {
  const bool tie_wins = !kAscending && (v == best) & (i < at);
  const bool take = (at < 0) | (v > best) | tie_wins | ((v != v) & (best == best));
  best = take ? v : best;
  at = take ? i : at;
}

// Computes the window maxima of plane xp band by band, with their argmax, and hands each band's
// outputs (rows() * w_out of them, row-major) to emit(band, max, argmax).
template <class T, class Stride, class Emit>
void max_pool_plane(const Pool2dShape& s, const T* xp, Stride stride_w, Emit&& emit) {
  using A = Arith<T>;
  constexpr A kEmpty = -std::numeric_limits<A>::infinity();
  for_each_band(s, [&](const Band& b) {
    A col_max[kBandBuffer];
    int col_at[kBandBuffer];
    std::fill(col_max, col_max + b.rows() * s.w, kEmpty);
    std::fill(col_at, col_at + b.rows() * s.w, -1);
    for_each_col_tap(s, b, [xp, col_max = +col_max, col_at = +col_at](int q, int i) {
      keep_max<true>(col_max[q], col_at[q], load(xp[i]), i);
    });
    A best[kBandBuffer];
    int at[kBandBuffer];
    std::fill(best, best + b.rows() * s.w_out, kEmpty);
    std::fill(at, at + b.rows() * s.w_out, -1);
    for_each_row_tap(s, b, stride_w, [best = +best, at = +at, col_max = +col_max, col_at = +col_at](int o, int q) {
      keep_max<false>(best[o], at[o], col_max[q], col_at[q]);
    });
    emit(b, best, at);
  });
}

// Clears a plane of dx unless accumulating.
template <class T> T* dx_plane(T* dx, std::ptrdiff_t p, const Pool2dShape& s, bool accumulate) {
  T* dxp = dx + p * in_plane(s);
  if (!accumulate) std::fill(dxp, dxp + in_plane(s), store<T>(0));
  return dxp;
}

// dst += v, rounded once for a 16-bit dst.
template <class T> void add_to(T& dst, Arith<T> v) { dst = store<T>(load(dst) + v); }

}  // namespace

// One output row of a 2x2 / stride-2 max pool over input rows r0 and r1. Strict compares keep the
// earlier cell on ties; the argmax is arithmetic rather than a select because that is the form GCC
// vectorises. NaN is not handled here: returns nonzero when the rows hold one, and the caller redoes
// the row with max_pool2x2_row_nan.
template <class T>
int max_pool2x2_row(const T* __restrict r0, const T* __restrict r1, T* __restrict y, uint8_t* __restrict argmax,
                    int w_out) {
  int nan = 0;
  for (int ow = 0; ow < w_out; ++ow) {
    const T a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
    const int tb = b > a, td = d > c;
    const T top = tb ? b : a, bottom = td ? d : c;
    const int tbot = bottom > top;
    y[ow] = tbot ? bottom : top;
    argmax[ow] = static_cast<uint8_t>(tbot * (2 + td) + (1 - tbot) * tb);
    nan |= (a != a) | (b != b) | (c != c) | (d != d);
  }
  return nan;
}

// The same row with keep_max's rule (NaN wins), for the rare rows that hold a NaN.
template <class T> void max_pool2x2_row_nan(const T* r0, const T* r1, T* y, uint8_t* argmax, int w_out) {
  for (int ow = 0; ow < w_out; ++ow) {
    const T v[4] = {r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
    T best = v[0];
    int at = 0;
    for (int k = 1; k < 4; ++k) keep_max<true>(best, at, v[k], k);
    y[ow] = best;
    argmax[ow] = static_cast<uint8_t>(at);
  }
}

#if CRUMB_POOL_AVX512
namespace {
// Output rows are short (a 28x28 map's 14, or 7) and the loop above reads every second input: GCC runs
// rows under a vector's width scalar, which made the 2x2 pool 15% of cnn's step. Here 16 outputs a step,
// the row's 32 inputs in two masked loads split into even and odd lanes (a tail's missing lanes are
// zeros, never stored).
// The first n lanes (none for n <= 0).
__mmask16 first(int n) { return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1); }

void even_odd(const float* p, int n, __m512& even, __m512& odd) {
  const __m512 lo = _mm512_maskz_loadu_ps(first(2 * n), p), hi = _mm512_maskz_loadu_ps(first(2 * n - 16), p + 16);
  const __m512i even_at = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  even = _mm512_permutex2var_ps(lo, even_at, hi);
  odd = _mm512_permutex2var_ps(lo, _mm512_add_epi32(even_at, _mm512_set1_epi32(1)), hi);
}

// max_pool2x2_row's compares and argmax rule, vector by vector: the same outputs.
int max_pool2x2_row_avx512(const float* r0, const float* r1, float* y, uint8_t* argmax, int w_out) {
  __mmask16 nan = 0;
  for (int ow = 0; ow < w_out; ow += 16) {
    const int n = std::min(16, w_out - ow);
    __m512 a, b, c, d;
    even_odd(r0 + 2 * ow, n, a, b);
    even_odd(r1 + 2 * ow, n, c, d);
    const __mmask16 tb = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ), td = _mm512_cmp_ps_mask(d, c, _CMP_GT_OQ);
    const __m512 top = _mm512_mask_blend_ps(tb, a, b), bottom = _mm512_mask_blend_ps(td, c, d);
    const __mmask16 tbot = _mm512_cmp_ps_mask(bottom, top, _CMP_GT_OQ);
    const __m512i at_bottom = _mm512_mask_blend_epi32(td, _mm512_set1_epi32(2), _mm512_set1_epi32(3));
    const __m512i at = _mm512_mask_blend_epi32(tbot, _mm512_maskz_mov_epi32(tb, _mm512_set1_epi32(1)), at_bottom);
    _mm512_mask_storeu_ps(y + ow, first(n), _mm512_mask_blend_ps(tbot, top, bottom));
    _mm512_mask_cvtepi32_storeu_epi8(argmax + ow, first(n), at);
    nan |= _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(c, d, _CMP_UNORD_Q);
  }
  return nan != 0;
}

// Rows 2 oh and 2 oh + 1 of a plane's dx from its dy row: each dy value to its window's argmax cell,
// zeros elsewhere (every cell, as the windows tile the plane).
void max_pool2x2_backward_row(float* x0, float* x1, const float* g, const uint8_t* argmax, int w_out) {
  const __m512i lo_at = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_at = _mm512_add_epi32(lo_at, _mm512_set1_epi32(8));
  for (int ow = 0; ow < w_out; ow += 16) {
    const int n = std::min(16, w_out - ow);
    const __m512 v = _mm512_maskz_loadu_ps(first(n), g + ow);
    const __m512i at = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(first(n), argmax + ow));
    auto to = [&](int k) { return _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(k)), v); };
    const __m512 a = to(0), b = to(1), c = to(2), d = to(3);
    _mm512_mask_storeu_ps(x0 + 2 * ow, first(2 * n), _mm512_permutex2var_ps(a, lo_at, b));
    _mm512_mask_storeu_ps(x0 + 2 * ow + 16, first(2 * n - 16), _mm512_permutex2var_ps(a, hi_at, b));
    _mm512_mask_storeu_ps(x1 + 2 * ow, first(2 * n), _mm512_permutex2var_ps(c, lo_at, d));
    _mm512_mask_storeu_ps(x1 + 2 * ow + 16, first(2 * n - 16), _mm512_permutex2var_ps(c, hi_at, d));
  }
}
}  // namespace
#endif

template <class T> void max_pool2x2_rows(const T* r0, const T* r1, T* y, uint8_t* argmax, int w_out) {
#if CRUMB_POOL_AVX512
  if constexpr (std::is_same_v<T, float>) {
    if (max_pool2x2_row_avx512(r0, r1, y, argmax, w_out)) max_pool2x2_row_nan(r0, r1, y, argmax, w_out);
    return;
  }
#endif
  if (max_pool2x2_row(r0, r1, y, argmax, w_out)) max_pool2x2_row_nan(r0, r1, y, argmax, w_out);
}

// 2x2 windows with stride 2 and no padding: the common case, row by row. 16-bit input rows are
// widened into a float32 band first, as many rows at once as the band holds, and the band's outputs
// narrowed back (exactly: maxima are input values), so the row loop vectorises as float32's does (on
// 16-bit values its strided loads do not).
template <class T> void max_pool2x2_forward(T* y, uint8_t* argmax, const T* x, const Pool2dShape& s) {
  for_each_plane(s, [&](std::ptrdiff_t p, auto) {
    const T* xp = x + p * in_plane(s);
    T* yp = y + p * out_plane(s);
    uint8_t* ap = argmax + p * out_plane(s);
    if constexpr (std::is_same_v<T, Arith<T>>) {
      for (int oh = 0; oh < s.h_out; ++oh) {
        const T* r0 = xp + std::ptrdiff_t{2 * oh} * s.w;
        const std::ptrdiff_t o = std::ptrdiff_t{oh} * s.w_out;
        max_pool2x2_rows(r0, r0 + s.w, yp + o, ap + o, s.w_out);
      }
    } else {
      float in[2 * kBandBuffer], out[kBandBuffer];
      const int step = std::max(1, kBandBuffer / s.w);
      for (int oh0 = 0; oh0 < s.h_out; oh0 += step) {
        const int rows = std::min(step, s.h_out - oh0), in_len = 2 * rows * s.w, out_len = rows * s.w_out;
        const T* src = xp + std::ptrdiff_t{2 * oh0} * s.w;
        T* dst = yp + std::ptrdiff_t{oh0} * s.w_out;
#pragma omp simd
        for (int j = 0; j < in_len; ++j) in[j] = load(src[j]);
        for (int r = 0; r < rows; ++r)
          max_pool2x2_rows(in + 2 * r * s.w, in + (2 * r + 1) * s.w, out + r * s.w_out,
                           ap + std::ptrdiff_t{oh0 + r} * s.w_out, s.w_out);
#pragma omp simd
        for (int j = 0; j < out_len; ++j) dst[j] = store<T>(out[j]);
      }
    }
  });
}

template <class T> void max_pool2d_forward(T* y, uint8_t* argmax, const T* x, const Pool2dShape& s) {
  if (s.kh == 2 && s.kw == 2 && s.stride_h == 2 && s.stride_w == 2 && s.pad_h == 0 && s.pad_w == 0)
    return max_pool2x2_forward(y, argmax, x, s);
  for_each_plane(s, [&](std::ptrdiff_t p, auto stride_w) {
    T* yp = y + p * out_plane(s);
    uint8_t* ap = argmax + p * out_plane(s);
    max_pool_plane(s, x + p * in_plane(s), stride_w, [&](const Band& b, const Arith<T>* best, const int* at) {
      const std::ptrdiff_t o0 = std::ptrdiff_t{b.oh0} * s.w_out;
      std::transform(best, best + b.rows() * s.w_out, yp + o0, store<T>);
      for (int o = 0; o < b.rows() * s.w_out; ++o) {
        const int oh = b.oh0 + o / s.w_out, ow = o % s.w_out;
        const int ki = at[o] / s.w - (oh * s.stride_h - s.pad_h), kj = at[o] % s.w - (ow * s.stride_w - s.pad_w);
        ap[o0 + o] = static_cast<uint8_t>(ki * s.kw + kj);
      }
    });
  });
}

template <class T>
void max_pool2d_backward(T* dx, const T* dy, const uint8_t* argmax, const Pool2dShape& s, bool accumulate) {
#if CRUMB_POOL_AVX512
  if constexpr (std::is_same_v<T, float>) {
    // 2x2 / 2 windows tiling the plane: every dx cell written once, no clearing first.
    if (!accumulate && s.kh == 2 && s.kw == 2 && s.stride_h == 2 && s.stride_w == 2 && s.pad_h == 0 &&
        s.pad_w == 0 && s.h == 2 * s.h_out && s.w == 2 * s.w_out) {
      return for_each_plane(s, [&](std::ptrdiff_t p, auto) {
        float* dxp = dx + p * in_plane(s);
        for (int oh = 0; oh < s.h_out; ++oh) {
          const std::ptrdiff_t o = std::ptrdiff_t{oh} * s.w_out;
          float* x0 = dxp + std::ptrdiff_t{2 * oh} * s.w;
          max_pool2x2_backward_row(x0, x0 + s.w, dy + p * out_plane(s) + o, argmax + p * out_plane(s) + o, s.w_out);
        }
      });
    }
  }
#endif
  for_each_plane(s, [&](std::ptrdiff_t p, auto) {
    T* dxp = dx_plane(dx, p, s, accumulate);
    const T* g = dy + p * out_plane(s);
    const uint8_t* ap = argmax + p * out_plane(s);
    // Serial within a plane: overlapping windows may share a maximum.
    for (int oh = 0, o = 0; oh < s.h_out; ++oh)
      for (int ow = 0; ow < s.w_out; ++ow, ++o) {
        const int ih = oh * s.stride_h - s.pad_h + ap[o] / s.kw, iw = ow * s.stride_w - s.pad_w + ap[o] % s.kw;
        add_to(dxp[ih * s.w + iw], load(g[o]));
      }
  });
}

// Padding cells are never visited, so they count as zeros while the sum is divided by the full
// window area.
template <class T> void avg_pool2d_forward(T* y, const T* x, const Pool2dShape& s) {
  using A = Arith<T>;
  const A inv_area = A(1) / (s.kh * s.kw);
  for_each_plane(s, [&](std::ptrdiff_t p, auto stride_w) {
    const T* xp = x + p * in_plane(s);
    for_each_band(s, [&](const Band& b) {
      A col_sum[kBandBuffer], sum[kBandBuffer];
      std::fill(col_sum, col_sum + b.rows() * s.w, A(0));
      for_each_col_tap(s, b, [xp, col_sum = +col_sum](int q, int i) { col_sum[q] += load(xp[i]); });
      std::fill(sum, sum + b.rows() * s.w_out, A(0));
      for_each_row_tap(s, b, stride_w, [sum = +sum, col_sum = +col_sum](int o, int q) { sum[o] += col_sum[q]; });
      T* yb = y + p * out_plane(s) + std::ptrdiff_t{b.oh0} * s.w_out;
      for (int o = 0; o < b.rows() * s.w_out; ++o) yb[o] = store<T>(sum[o] * inv_area);
    });
  });
}

// The transpose of the forward: spread each output's gradient over its window columns, then rows.
template <class T> void avg_pool2d_backward(T* dx, const T* dy, const Pool2dShape& s, bool accumulate) {
  using A = Arith<T>;
  const A inv_area = A(1) / (s.kh * s.kw);
  for_each_plane(s, [&](std::ptrdiff_t p, auto stride_w) {
    T* dxp = dx_plane(dx, p, s, accumulate);
    for_each_band(s, [&](const Band& b) {
      const T* g = dy + p * out_plane(s) + std::ptrdiff_t{b.oh0} * s.w_out;
      A col_grad[kBandBuffer];
      std::fill(col_grad, col_grad + b.rows() * s.w, A(0));
      for_each_row_tap(s, b, stride_w,
                       [g, inv_area, col_grad = +col_grad](int o, int q) { col_grad[q] += load(g[o]) * inv_area; });
      for_each_col_tap(s, b, [dxp, col_grad = +col_grad](int q, int i) { add_to(dxp[i], col_grad[q]); });
    });
  });
}

template <class T> void global_avg_pool_forward(T* y, const T* x, int n, int c, int hw) {
  using A = Arith<T>;
  const std::ptrdiff_t rows = std::ptrdiff_t{n} * c;
  const A inv = A(1) / hw;
#pragma omp parallel for schedule(static) if (rows * hw > kParallelGrain)
  for (std::ptrdiff_t r = 0; r < rows; ++r) {
    const T* xr = x + r * hw;
    A sum = 0;
    for (int j = 0; j < hw; ++j) sum += load(xr[j]);
    y[r] = store<T>(sum * inv);
  }
}

template <class T> void global_avg_pool_backward(T* dx, const T* dy, int n, int c, int hw, bool accumulate) {
  using A = Arith<T>;
  const std::ptrdiff_t rows = std::ptrdiff_t{n} * c;
  const A inv = A(1) / hw;
  with_write_mode(accumulate, [&](auto acc) {
#pragma omp parallel for schedule(static) if (rows * hw > kParallelGrain)
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      const A g = load(dy[r]) * inv;
      T* dxr = dx + r * hw;
      for (int j = 0; j < hw; ++j) put(acc, dxr[j], g);
    }
  });
}

template <class T> void adaptive_avg_pool2d_forward(T* y, const T* x, const AdaptivePool2dShape& s) {
  const std::ptrdiff_t planes = std::ptrdiff_t{s.n} * s.c, in_plane = std::ptrdiff_t{s.h} * s.w,
                       out_plane = std::ptrdiff_t{s.h_out} * s.w_out;
#pragma omp parallel for schedule(static) if (planes * in_plane > kParallelGrain)
  for (std::ptrdiff_t p = 0; p < planes; ++p) {
    const T* xp = x + p * in_plane;
    T* yp = y + p * out_plane;
    for (int i = 0; i < s.h_out; ++i) {
      const int r0 = adaptive_begin(i, s.h, s.h_out), r1 = adaptive_end(i, s.h, s.h_out);
      for (int j = 0; j < s.w_out; ++j) {
        const int c0 = adaptive_begin(j, s.w, s.w_out), c1 = adaptive_end(j, s.w, s.w_out);
        Arith<T> sum = 0;
        for (int r = r0; r < r1; ++r)
          for (int c = c0; c < c1; ++c) sum += load(xp[r * s.w + c]);
        yp[i * s.w_out + j] = store<T>(sum / static_cast<Arith<T>>((r1 - r0) * (c1 - c0)));
      }
    }
  }
}

template <class T>
void adaptive_avg_pool2d_backward(T* dx, const T* dy, const AdaptivePool2dShape& s, bool accumulate) {
  const std::ptrdiff_t planes = std::ptrdiff_t{s.n} * s.c, in_plane = std::ptrdiff_t{s.h} * s.w,
                       out_plane = std::ptrdiff_t{s.h_out} * s.w_out;
  with_write_mode(accumulate, [&](auto acc) {
#pragma omp parallel for schedule(static) if (planes * in_plane > kParallelGrain)
    for (std::ptrdiff_t p = 0; p < planes; ++p) {
      const T* dyp = dy + p * out_plane;
      T* dxp = dx + p * in_plane;
      for (int r = 0; r < s.h; ++r) {
        const int i0 = adaptive_first_bin(r, s.h, s.h_out), i1 = adaptive_last_bin(r, s.h, s.h_out);
        for (int c = 0; c < s.w; ++c) {
          const int j0 = adaptive_first_bin(c, s.w, s.w_out), j1 = adaptive_last_bin(c, s.w, s.w_out);
          Arith<T> sum = 0;
          for (int i = i0; i <= i1; ++i) {
            const int rows = adaptive_end(i, s.h, s.h_out) - adaptive_begin(i, s.h, s.h_out);
            for (int j = j0; j <= j1; ++j) {
              const int cols = adaptive_end(j, s.w, s.w_out) - adaptive_begin(j, s.w, s.w_out);
              sum += load(dyp[i * s.w_out + j]) / static_cast<Arith<T>>(rows * cols);
            }
          }
          put(acc, dxp[r * s.w + c], sum);
        }
      }
    }
  });
}

#define CRUMB_INSTANTIATE(T)                                                                   \
  template void max_pool2d_forward<T>(T*, uint8_t*, const T*, const Pool2dShape&);            \
  template void max_pool2d_backward<T>(T*, const T*, const uint8_t*, const Pool2dShape&, bool); \
  template void avg_pool2d_forward<T>(T*, const T*, const Pool2dShape&);                      \
  template void avg_pool2d_backward<T>(T*, const T*, const Pool2dShape&, bool);               \
  template void global_avg_pool_forward<T>(T*, const T*, int, int, int);                      \
  template void global_avg_pool_backward<T>(T*, const T*, int, int, int, bool);             \
  template void adaptive_avg_pool2d_forward<T>(T*, const T*, const AdaptivePool2dShape&);     \
  template void adaptive_avg_pool2d_backward<T>(T*, const T*, const AdaptivePool2dShape&, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
CRUMB_INSTANTIATE(bf16)
CRUMB_INSTANTIATE(f16)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
