// The bf16 convolution forward, and the stride-1 data gradient as a forward over dy, on AVX512_BF16's vdpbf16ps. Per
// sample and group, the column matrix is packed into the workspace as vdpbf16ps reads it: rows in pairs, each pixel's
// two entries side by side ([k / 2][pixels][2], pixels padded to 16), so that one 512-bit load holds 16 pixels' pairs
// and one broadcast 32-bit load a pair of the weight's row. Tiles of 8 output channels by 32 pixels sum in float32 over
// the pairs in order; every output takes the same sequence of operations wherever it falls, so the batch (the micro-
// batch size) does not change it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "engine/base/error.h"
#include "kernels/bf16_dot.h"
#include "kernels/conv2d.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/conv2d_phases.h"
#include "kernels/cpu/dpbf16.h"
#include "kernels/cpu/kernel_util.h"


namespace crumb::cpu {
namespace {

// The workspace holds at most this many samples' packed columns at once.
constexpr int kMaxSlices = 8;

struct Packing {
  std::ptrdiff_t k;      // rows of a group's column matrix: c_in / groups * kh * kw
  std::ptrdiff_t pairs;  // k / 2 rounded up
  std::ptrdiff_t hw;     // output pixels
  std::ptrdiff_t hw16;   // hw rounded up to 16
  explicit Packing(const Conv2dShape& s)
      : k(std::ptrdiff_t{s.c_in / s.groups} * s.kh * s.kw),
        pairs((k + 1) / 2),
        hw(std::ptrdiff_t{s.h_out} * s.w_out),
        hw16((hw + 15) / 16 * 16) {}
  // The packed columns, then two plain rows.
  std::ptrdiff_t slice_len() const { return pairs * hw16 * 2 + 2 * hw16; }
};

int slices(const Conv2dShape& s) { return std::max(1, std::min(s.n, kMaxSlices)); }

// The slices that run side by side: one where the convolution is too small to split.
int running_slices(const Conv2dShape& s) {
  const Packing p(s);
  return 1.0 * s.n * s.c_out * p.k * p.hw < detail::kParallelMacs ? 1 : std::min(slices(s), omp_get_max_threads());
}

// Row r of the group's plain column matrix (hw entries, zeros outside the input), into d: the valid
// rows and columns of its tap found once, each output row a short copy.
void column_row(const Conv2dShape& s, const uint16_t* x_g, std::ptrdiff_t r, uint16_t* d) {
  const int taps = s.kh * s.kw, c = static_cast<int>(r / taps), ki = static_cast<int>(r % taps / s.kw),
            kj = static_cast<int>(r % s.kw);
  const std::ptrdiff_t w_out = s.w_out, hw = std::ptrdiff_t{s.h_out} * w_out;
  const detail::Range rows = detail::valid_range(ki, s.stride_h, s.pad_h, s.h, s.h_out);
  const detail::Range cols = detail::valid_range(kj, s.stride_w, s.pad_w, s.w, s.w_out);
  const int len = cols.hi - cols.lo;
  if (len <= 0 || rows.lo >= rows.hi) {
    std::fill(d, d + hw, uint16_t{0});
    return;
  }
  std::fill(d, d + rows.lo * w_out, uint16_t{0});
  std::fill(d + rows.hi * w_out, d + hw, uint16_t{0});
  const std::ptrdiff_t row_step = std::ptrdiff_t{s.stride_h} * s.w;
  const uint16_t* src = x_g + (std::ptrdiff_t{c} * s.h + rows.lo * s.stride_h - s.pad_h + ki) * s.w +
                        cols.lo * s.stride_w - s.pad_w + kj;
  for (uint16_t* seg = d + rows.lo * w_out; seg < d + rows.hi * w_out; seg += w_out, src += row_step) {
    std::fill(seg, seg + cols.lo, uint16_t{0});
    if (s.stride_w == 1) {
      detail::copy_short(seg + cols.lo, src, len);
    } else {
      for (int q = 0; q < len; ++q) seg[cols.lo + q] = src[std::ptrdiff_t{q} * s.stride_w];
    }
    std::fill(seg + cols.hi, seg + w_out, uint16_t{0});
  }
}

// The packed column matrix of one sample's group (input channels from x_g on): each pair of rows built
// plain in `rows` (2 * hw16 entries) and interleaved into 32-bit (pixel, pair) entries.
void pack_columns(const Conv2dShape& s, const Packing& p, const uint16_t* x_g, uint16_t* col, uint16_t* rows) {
  uint16_t *even = rows, *odd = rows + p.hw16;
  for (std::ptrdiff_t j = 0; j < p.pairs; ++j) {
    column_row(s, x_g, 2 * j, even);
    if (2 * j + 1 < p.k) {
      column_row(s, x_g, 2 * j + 1, odd);
    } else {
      std::fill(odd, odd + p.hw, uint16_t{0});
    }
    auto* out = reinterpret_cast<uint32_t*>(col) + j * p.hw16;
#pragma omp simd
    for (std::ptrdiff_t q = 0; q < p.hw; ++q) out[q] = uint32_t{even[q]} | uint32_t{odd[q]} << 16;
    std::fill(out + p.hw, out + p.hw16, uint32_t{0});
  }
}

// Stride 1 without a column matrix: each input plane zero-padded, its channels interleaved in pairs
// (32-bit entries), and the outputs computed at flat positions oh * W + ow of the padded width W, where
// every tap is the same contiguous run shifted by ki * W + kj; the W - w_out positions past each row's
// end are computed too and dropped when the rows are copied out.
//
// On AMX (uses_amx()) the same layout is what TDPBF16PS reads: a B tile is kc channel pairs (rows, one
// plane apart) by 16 flat positions, an A tile 16 output channels by the same kc pairs of one tap of the
// packed weights, and a C tile the 16 x 16 float32 sums, stored into the flat outputs. The pairs are
// padded with zero planes to a multiple of kc and the output channels with zero weights to 16, so that
// every tile is whole. Only where both channel counts fill a tile (amx_tiles_fit).

struct Direct {
  bool amx;
  std::ptrdiff_t w;      // padded width W
  std::ptrdiff_t plane;  // entries per channel pair: the padded plane, then a run's overreach
  std::ptrdiff_t flat;   // flat output positions, h_out * W, rounded up to 32
  std::ptrdiff_t pairs;  // input channels per group in pairs (on AMX, padded to a multiple of kc)
  std::ptrdiff_t rows;   // output channels per group in the packed weights and outputs (on AMX, to 16)
  int kc;                // pairs per AMX tile
  int taps;
  explicit Direct(const Conv2dShape& s, bool amx_allowed = uses_amx())
      : amx(amx_allowed && amx_tiles_fit(s)),
        w(s.w + 2 * s.pad_w),
        plane((s.h + 2 * s.pad_h) * w + 32 + s.kw),
        flat((s.h_out * w + 31) / 32 * 32),
        pairs((s.c_in / s.groups + 1) / 2),
        rows(s.c_out / s.groups),
        kc(0),
        taps(s.kh * s.kw) {
    if (amx) {
      const std::ptrdiff_t chunks = (pairs + 15) / 16;
      kc = static_cast<int>((pairs + chunks - 1) / chunks);
      pairs = chunks * kc;
      rows = (rows + 15) / 16 * 16;
    }
  }
  // Per thread: the interleaved planes, then the outputs at flat positions (bf16, or float32 where they
  // are added to what the output holds or come out of AMX's tiles).
  std::ptrdiff_t slice_len(bool wide = false) const { return pairs * plane * 2 + rows * flat * (wide || amx ? 2 : 1); }
  // Shared: the weights as [group][row][tap][pair] pairs.
  std::ptrdiff_t weights_len(const Conv2dShape& s) const { return std::ptrdiff_t{s.groups} * rows * taps * pairs * 2; }
  std::ptrdiff_t group_weights() const { return rows * taps * pairs; }
};

bool runs_direct(const Conv2dShape& s) { return s.stride_h == 1 && s.stride_w == 1; }

// The data gradient of stride-1 s as a forward convolution: dx is the correlation of dy, padded by
// kernel - 1 - pad, with the kernel flipped and its channels transposed (within each group).
Conv2dShape transposed(const Conv2dShape& s) {
  Conv2dShape t = s;
  t.c_in = s.c_out, t.h = s.h_out, t.w = s.w_out;
  t.c_out = s.c_in, t.h_out = s.h, t.w_out = s.w;
  t.pad_h = s.kh - 1 - s.pad_h, t.pad_w = s.kw - 1 - s.pad_w;
  return t;
}

// One sample's group of input channels (from x_g) into the padded pair planes.
void pack_planes(const Conv2dShape& s, const Direct& d, const uint16_t* x_g, uint32_t* planes) {
  std::memset(planes, 0, sizeof(uint32_t) * d.pairs * d.plane);
  const int c_in_g = s.c_in / s.groups;
  const std::ptrdiff_t in_plane = std::ptrdiff_t{s.h} * s.w;
  for (std::ptrdiff_t j = 0; j < (c_in_g + 1) / 2; ++j) {
    const uint16_t* even = x_g + 2 * j * in_plane;
    const uint16_t* odd = 2 * j + 1 < c_in_g ? even + in_plane : nullptr;
    for (int ih = 0; ih < s.h; ++ih) {
      uint32_t* out = planes + j * d.plane + (ih + s.pad_h) * d.w + s.pad_w;
      const uint16_t* a = even + std::ptrdiff_t{ih} * s.w;
      if (odd) {
        const uint16_t* b = odd + std::ptrdiff_t{ih} * s.w;
#pragma omp simd
        for (int iw = 0; iw < s.w; ++iw) out[iw] = uint32_t{a[iw]} | uint32_t{b[iw]} << 16;
      } else {
#pragma omp simd
        for (int iw = 0; iw < s.w; ++iw) out[iw] = a[iw];
      }
    }
  }
}

// The weights of every group of s as [row][tap][pair] pairs, zero past the group's channels (the odd
// channel's partner, AMX's padding); weight(co, ci, t): output channel co's weight for input channel ci
// of its group at tap t.
template <class Weight> void pack_weights(const Conv2dShape& s, const Direct& d, Weight&& weight, uint32_t* out) {
  const int c_in_g = s.c_in / s.groups, c_out_g = s.c_out / s.groups;
  auto half = [&](int co, int ci, int t) { return ci < c_in_g ? uint32_t{weight(co, ci, t)} : 0u; };
  for (int g = 0; g < s.groups; ++g)
    for (std::ptrdiff_t r = 0; r < d.rows; ++r)
      for (int t = 0; t < d.taps; ++t)
        for (std::ptrdiff_t j = 0; j < d.pairs; ++j) {
          const int co = g * c_out_g + static_cast<int>(r), ci = static_cast<int>(2 * j);
          *out++ = r < c_out_g ? half(co, ci, t) | half(co, ci + 1, t) << 16 : 0u;
        }
}

#if CRUMB_DPBF16
// An output vector as both tiles store it: the bias added where there is one, relu_forward's rule where
// asked (NaN propagates, -0 becomes 0: a NaN compares false and stays), rounded to bf16.
CRUMB_TARGET_DPBF16 inline __m256i output_lanes(__m512 acc, const __m512* bias, bool relu) {
  __m512 o = bias ? _mm512_add_ps(acc, *bias) : acc;
  if (relu) o = _mm512_mask_mov_ps(o, _mm512_cmp_ps_mask(o, _mm512_setzero_ps(), _CMP_LE_OQ), _mm512_setzero_ps());
  return detail::to_bf16_lanes(o);
}

// y rows [co, co + R) at pixels [px, px + 16 V) (the last vector under `tail`): acc over the pairs.
template <int R, int V, class B>
CRUMB_TARGET_DPBF16 void conv_tile(uint16_t* y, std::ptrdiff_t hw, const uint16_t* w, std::ptrdiff_t k,
                                   const uint16_t* col, std::ptrdiff_t hw16, const B* b, bool relu, __mmask16 tail) {
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  const std::ptrdiff_t full = k / 2;
  for (std::ptrdiff_t j = 0; j < full; ++j) {
    __m512bh cv[V];
    for (int v = 0; v < V; ++v) cv[v] = (__m512bh)_mm512_loadu_si512(col + j * hw16 * 2 + v * 32);
    for (int r = 0; r < R; ++r) {
      int32_t pair;
      std::memcpy(&pair, w + r * k + 2 * j, 4);
      const __m512bh wv = (__m512bh)_mm512_set1_epi32(pair);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], wv, cv[v]);
    }
  }
  if (k & 1) {  // the last row alone: its pair's second weight is zero (the column's is padding)
    __m512bh cv[V];
    for (int v = 0; v < V; ++v) cv[v] = (__m512bh)_mm512_loadu_si512(col + full * hw16 * 2 + v * 32);
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = (__m512bh)_mm512_set1_epi32(w[r * k + k - 1]);
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], wv, cv[v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 bias = _mm512_set1_ps(b ? to_float(b[r]) : 0.0f);
    for (int v = 0; v < V; ++v)
      _mm256_mask_storeu_epi16(y + r * hw + v * 16, v == V - 1 ? tail : __mmask16(0xffff),
                               output_lanes(acc[r][v], b ? &bias : nullptr, relu));
  }
}

constexpr int kRows = 8;

template <class B> using TileFn = void (*)(uint16_t*, std::ptrdiff_t, const uint16_t*, std::ptrdiff_t, const uint16_t*,
                                           std::ptrdiff_t, const B*, bool, __mmask16);
template <class B, int V, int... R> constexpr void fill_row(TileFn<B>* t, std::integer_sequence<int, R...>) {
  ((t[R] = conv_tile<R + 1, V, B>), ...);
}

// One sample's group: y_g [c_out / groups, hw] from its packed columns.
template <class B>
void conv_group(uint16_t* y_g, const uint16_t* w_g, const B* b_g, int c_out_g, const Packing& p, const uint16_t* col,
                bool relu) {
  static const auto table = [] {
    struct {
      TileFn<B> one[kRows], two[kRows];
    } t{};
    fill_row<B, 1>(t.one, std::make_integer_sequence<int, kRows>{});
    fill_row<B, 2>(t.two, std::make_integer_sequence<int, kRows>{});
    return t;
  }();
  for (std::ptrdiff_t px = 0; px < p.hw; px += 32) {
    const std::ptrdiff_t left = p.hw - px;
    const bool two = left > 16;
    const std::ptrdiff_t last = two ? left - 16 : left;
    const auto tail = static_cast<__mmask16>(last >= 16 ? 0xffff : (1u << last) - 1);
    for (int co = 0; co < c_out_g; co += kRows) {
      const int rows = std::min(kRows, c_out_g - co);
      (two ? table.two : table.one)[rows - 1](y_g + co * p.hw + px, p.hw, w_g + co * p.k, p.k, col + px * 2, p.hw16,
                                              b_g ? b_g + co : nullptr, relu, tail);
    }
  }
}

// Flat outputs [p, p + 16 V) of rows [co, co + R), over the taps, each tap's pairs in order: into out as
// bf16, or as float32 sums (no bias, no ReLU) where the output adds them to what it holds.
template <int R, int V, class B, bool Wide>
CRUMB_TARGET_DPBF16 void direct_tile(uint16_t* out, std::ptrdiff_t ldo, const uint32_t* wp, const uint32_t* planes,
                                     const Conv2dShape& s, const Direct& d, const B* b, bool relu) {
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  const std::ptrdiff_t per_row = d.taps * d.pairs;
  for (int t = 0; t < d.taps; ++t) {
    const uint32_t* src = planes + (t / s.kw) * d.w + t % s.kw;
    for (std::ptrdiff_t j = 0; j < d.pairs; ++j, src += d.plane) {
      __m512bh xv[V];
      for (int v = 0; v < V; ++v) xv[v] = (__m512bh)_mm512_loadu_si512(src + 16 * v);
      for (int r = 0; r < R; ++r) {
        const __m512bh wv = (__m512bh)_mm512_set1_epi32(static_cast<int>(wp[r * per_row + t * d.pairs + j]));
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], wv, xv[v]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 bias = _mm512_set1_ps(b ? to_float(b[r]) : 0.0f);
    for (int v = 0; v < V; ++v) {
      if constexpr (Wide)
        _mm512_storeu_ps(reinterpret_cast<float*>(out) + r * ldo + 16 * v, acc[r][v]);
      else
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * ldo + 16 * v),
                            output_lanes(acc[r][v], b ? &bias : nullptr, relu));
    }
  }
}

template <class B> using DirectFn = void (*)(uint16_t*, std::ptrdiff_t, const uint32_t*, const uint32_t*,
                                             const Conv2dShape&, const Direct&, const B*, bool);
template <class B, int V, bool Wide, int... R>
constexpr void fill_direct(DirectFn<B>* t, std::integer_sequence<int, R...>) {
  ((t[R] = direct_tile<R + 1, V, B, Wide>), ...);
}

// Flat outputs [p, p + 32) of packed rows [co, co + 16 M) into out (float32, ldo apart), over the taps,
// each tap's pairs kc at a time: C tiles 0-3 (rows block m, positions block n at 2 m + n), A tiles 4-5
// (the weights of rows block m), B tiles 6-7 (the planes at positions block n).
template <int M>
CRUMB_TARGET_AMX void amx_block(float* out, std::ptrdiff_t ldo, const uint32_t* wp, const uint32_t* planes,
                                const Conv2dShape& s, const Direct& d) {
  detail::tiles_zero<M, 2>();
  const std::ptrdiff_t per_row = d.taps * d.pairs;
  for (int t = 0; t < d.taps; ++t) {
    const uint32_t* src = planes + (t / s.kw) * d.w + t % s.kw;
    for (std::ptrdiff_t j = 0; j < d.pairs; j += d.kc)
      detail::tiles_step<M, 2>(wp + t * d.pairs + j, static_cast<long>(per_row * 4), src + j * d.plane,
                               static_cast<long>(d.plane * 4));
  }
  detail::tiles_store<M, 2>(out, static_cast<long>(ldo * 4));
}

// Every flat output of a sample's group as float32 sums, [d.rows][d.flat], on AMX's tiles.
CRUMB_TARGET_AMX void amx_sums(float* out, const uint32_t* wp_g, const uint32_t* planes, const Conv2dShape& s,
                               const Direct& d) {
  detail::amx_fence();
  detail::TileConfig c;
  for (int i = 0; i < 8; ++i) {
    const bool a = i == 4 || i == 5, b = i >= 6;
    c.colsb[i] = static_cast<uint16_t>(a ? d.kc * 4 : 64);
    c.rows[i] = static_cast<uint8_t>(b ? d.kc : 16);
  }
  detail::load_tile_config(c);
  const std::ptrdiff_t used = std::ptrdiff_t{s.h_out} * d.w, per_row = d.taps * d.pairs;
  for (std::ptrdiff_t p = 0; p < used; p += 32)
    for (std::ptrdiff_t co = 0; co < d.rows; co += 32) {
      float* o = out + co * d.flat + p;
      if (d.rows - co >= 32)
        amx_block<2>(o, d.flat, wp_g + co * per_row, planes + p, s, d);
      else
        amx_block<1>(o, d.flat, wp_g + co * per_row, planes + p, s, d);
    }
  detail::release_tiles();
}

// n float32 sums rounded into bf16 as the vdpbf16ps tiles store theirs (bias, ReLU), or with `add` added
// to what dst holds in float32 first (kernel_util's put: one rounding).
CRUMB_TARGET_DPBF16 void store_sums(uint16_t* dst, const float* sums, int n, const __m512* bias, bool relu,
                                    bool add = false) {
  for (int i = 0; i < n; i += 16) {
    const auto m = static_cast<__mmask16>(n - i >= 16 ? 0xffff : (1u << (n - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, sums + i);
    if (add) {
      const __m512i held = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, dst + i));
      v = _mm512_add_ps(_mm512_castsi512_ps(_mm512_slli_epi32(held, 16)), v);
    }
    _mm256_mask_storeu_epi16(dst + i, m, output_lanes(v, bias, relu));
  }
}

// One sample's group: y_g [c_out / groups, hw] (=, or += with accumulate: added in float32 and rounded
// once) from its packed planes, through the flat outputs in `out`.
template <class B>
void direct_group(uint16_t* y_g, const uint32_t* wp_g, const B* b_g, const Conv2dShape& s, const Direct& d,
                  const uint32_t* planes, uint16_t* out, bool relu, bool accumulate = false) {
  static const auto table = [] {
    struct {
      DirectFn<B> one[kRows], two[kRows], wide_one[kRows], wide_two[kRows];
    } t{};
    fill_direct<B, 1, false>(t.one, std::make_integer_sequence<int, kRows>{});
    fill_direct<B, 2, false>(t.two, std::make_integer_sequence<int, kRows>{});
    fill_direct<B, 1, true>(t.wide_one, std::make_integer_sequence<int, kRows>{});
    fill_direct<B, 2, true>(t.wide_two, std::make_integer_sequence<int, kRows>{});
    return t;
  }();
  const int c_out_g = s.c_out / s.groups;
  if (d.amx) {
    amx_sums(reinterpret_cast<float*>(out), wp_g, planes, s, d);
  } else {
    const std::ptrdiff_t used = std::ptrdiff_t{s.h_out} * d.w;
    // Wide outputs are float32: twice the bf16 elements apart, at twice the offset.
    const int scale = accumulate ? 2 : 1;
    for (std::ptrdiff_t p = 0; p < used; p += 32) {
      const bool two = used - p > 16;
      const DirectFn<B>* tiles = accumulate ? (two ? table.wide_two : table.wide_one) : (two ? table.two : table.one);
      for (int co = 0; co < c_out_g; co += kRows) {
        const int rows = std::min(kRows, c_out_g - co);
        tiles[rows - 1](out + scale * (co * d.flat + p), d.flat, wp_g + co * d.taps * d.pairs, planes + p, s, d,
                        b_g ? b_g + co : nullptr, relu);
      }
    }
  }
  // The rows out of the flat positions: float32 sums (added to y, or on AMX biased and rounded), or bf16.
  const auto* sums = reinterpret_cast<const float*>(out);
  for (int co = 0; co < c_out_g; ++co) {
    const __m512 bias = _mm512_set1_ps(b_g ? to_float(b_g[co]) : 0.0f);
    for (int oh = 0; oh < s.h_out; ++oh) {
      uint16_t* dst = y_g + (std::ptrdiff_t{co} * s.h_out + oh) * s.w_out;
      const std::ptrdiff_t at = co * d.flat + oh * d.w;
      if (accumulate || d.amx) {
        store_sums(dst, sums + at, s.w_out, b_g ? &bias : nullptr, relu, accumulate);
      } else {
        std::memcpy(dst, out + at, sizeof(uint16_t) * s.w_out);
      }
    }
  }
}
#endif

}  // namespace

// The larger of what the two tile paths need where the CPU has AMX (allow_amx may switch between them
// after a plan is compiled), else the vdpbf16ps path's.
template <class Size> std::size_t either_path(Size&& size) {
  return std::max(size(false), has_amx() ? size(true) : std::size_t{0});
}

std::size_t conv2d_forward_bf16_workspace(const Conv2dShape& s) {
  return either_path([&](bool amx) {
    if (detail::runs_phased(s, amx)) return detail::phased_forward_workspace(s);
    if (runs_direct(s)) {
      const Direct d(s, amx);
      return static_cast<std::size_t>(d.weights_len(s) + slices(s) * d.slice_len());
    }
    return static_cast<std::size_t>(slices(s) * Packing(s).slice_len());
  });
}

template <class B>
void conv2d_forward_bf16(bf16* y, const bf16* x, const bf16* w, const B* b, const Conv2dShape& s, bf16* workspace,
                         bool relu) {
#if CRUMB_DPBF16
  CRUMB_CHECK(has_bf16_dot(), "conv2d_forward_bf16: this CPU has no AVX512_BF16 (check has_bf16_dot() first)");
  if (detail::runs_phased(s)) return detail::phased_forward(y, x, w, b, s, workspace, relu);
  const Packing p(s);
  const int groups = s.groups, c_in_g = s.c_in / groups, c_out_g = s.c_out / groups;
  const std::ptrdiff_t x_len = std::ptrdiff_t{s.c_in} * s.h * s.w, y_len = std::ptrdiff_t{s.c_out} * p.hw;
  const int n_slices = running_slices(s);
  auto* const xs = reinterpret_cast<const uint16_t*>(x);
  auto* const ws = reinterpret_cast<const uint16_t*>(w);
  auto* const ys = reinterpret_cast<uint16_t*>(y);
  if (runs_direct(s)) {
    const Direct d(s);
    auto* const wp = reinterpret_cast<uint32_t*>(workspace);
    const int taps = d.taps;
    pack_weights(s, d, [&](int co, int ci, int t) { return ws[(std::ptrdiff_t{co} * c_in_g + ci) * taps + t]; }, wp);
    uint16_t* const slices_at = reinterpret_cast<uint16_t*>(workspace) + d.weights_len(s);
#pragma omp parallel for schedule(static) num_threads(n_slices) if (n_slices > 1)
    for (int slice = 0; slice < n_slices; ++slice) {
      auto* planes = reinterpret_cast<uint32_t*>(slices_at + slice * d.slice_len());
      uint16_t* out = slices_at + slice * d.slice_len() + d.pairs * d.plane * 2;
      const int i0 = s.n * slice / n_slices, i1 = s.n * (slice + 1) / n_slices;
      for (int i = i0; i < i1; ++i)
        for (int g = 0; g < groups; ++g) {
          pack_planes(s, d, xs + i * x_len + std::ptrdiff_t{g} * c_in_g * s.h * s.w, planes);
          direct_group(ys + i * y_len + std::ptrdiff_t{g} * c_out_g * p.hw, wp + g * d.group_weights(),
                       b ? b + g * c_out_g : nullptr, s, d, planes, out, relu);
        }
    }
    return;
  }
#pragma omp parallel for schedule(static) num_threads(n_slices) if (n_slices > 1)
  for (int slice = 0; slice < n_slices; ++slice) {
    uint16_t* col = reinterpret_cast<uint16_t*>(workspace) + slice * p.slice_len();
    const int i0 = s.n * slice / n_slices, i1 = s.n * (slice + 1) / n_slices;
    for (int i = i0; i < i1; ++i)
      for (int g = 0; g < groups; ++g) {
        pack_columns(s, p, xs + i * x_len + std::ptrdiff_t{g} * c_in_g * s.h * s.w, col, col + p.pairs * p.hw16 * 2);
        conv_group(ys + i * y_len + std::ptrdiff_t{g} * c_out_g * p.hw, ws + std::ptrdiff_t{g} * c_out_g * p.k,
                   b ? b + g * c_out_g : nullptr, c_out_g, p, col, relu);
      }
  }
#else
  (void)y, (void)x, (void)w, (void)b, (void)s, (void)workspace, (void)relu;
  CRUMB_FAIL("conv2d_forward_bf16: this build has no AVX512_BF16 kernels (check has_bf16_dot() first)");
#endif
}

bool conv2d_backward_data_bf16_direct(const Conv2dShape& s) {
  return (runs_direct(s) && s.pad_h < s.kh && s.pad_w < s.kw) || detail::runs_phased(s);
}

std::size_t conv2d_backward_data_bf16_workspace(const Conv2dShape& s) {
  return either_path([&](bool amx) {
    if (detail::runs_phased(s, amx)) return detail::phased_data_workspace(s);
    const Conv2dShape t = transposed(s);
    const Direct d(t, amx);
    return static_cast<std::size_t>(d.weights_len(t) + slices(t) * d.slice_len(true));
  });
}

void conv2d_backward_data_bf16(bf16* dx, const bf16* dy, const bf16* w, const Conv2dShape& s, bf16* workspace,
                               bool accumulate) {
#if CRUMB_DPBF16
  CRUMB_CHECK(has_bf16_dot(), "conv2d_backward_data_bf16: this CPU has no AVX512_BF16 (check has_bf16_dot() first)");
  CRUMB_CHECK(conv2d_backward_data_bf16_direct(s),
              "conv2d_backward_data_bf16: stride 1 and padding under the kernel, or stride 2 on AMX, only");
  if (detail::runs_phased(s)) return detail::phased_data(dx, dy, w, s, workspace, accumulate);
  const Conv2dShape t = transposed(s);
  const Direct d(t);
  const int groups = s.groups, c_in_g = s.c_in / groups, c_out_g = s.c_out / groups, taps = d.taps;
  auto* const ws = reinterpret_cast<const uint16_t*>(w);
  auto* const wp = reinterpret_cast<uint32_t*>(workspace);
  // Output channel ci of the transposed convolution (an input channel of s, in group ci / c_in_g) reads
  // input channel co of its group (an output channel of s) through s's weight flipped.
  pack_weights(t, d, [&](int ci, int co, int tap) {
    return ws[((std::ptrdiff_t{ci / c_in_g} * c_out_g + co) * c_in_g + ci % c_in_g) * taps + (taps - 1 - tap)];
  }, wp);
  const std::ptrdiff_t dy_len = std::ptrdiff_t{s.c_out} * s.h_out * s.w_out;
  const std::ptrdiff_t dx_len = std::ptrdiff_t{s.c_in} * s.h * s.w;
  const int n_slices = running_slices(t);
  auto* const dys = reinterpret_cast<const uint16_t*>(dy);
  auto* const dxs = reinterpret_cast<uint16_t*>(dx);
  uint16_t* const slices_at = reinterpret_cast<uint16_t*>(workspace) + d.weights_len(t);
#pragma omp parallel for schedule(static) num_threads(n_slices) if (n_slices > 1)
  for (int slice = 0; slice < n_slices; ++slice) {
    auto* planes = reinterpret_cast<uint32_t*>(slices_at + slice * d.slice_len(true));
    uint16_t* out = slices_at + slice * d.slice_len(true) + d.pairs * d.plane * 2;
    const int i0 = s.n * slice / n_slices, i1 = s.n * (slice + 1) / n_slices;
    for (int i = i0; i < i1; ++i)
      for (int g = 0; g < groups; ++g) {
        pack_planes(t, d, dys + i * dy_len + std::ptrdiff_t{g} * c_out_g * s.h_out * s.w_out, planes);
        direct_group(dxs + i * dx_len + std::ptrdiff_t{g} * c_in_g * s.h * s.w,
                     wp + g * d.group_weights(), static_cast<const float*>(nullptr), t, d,
                     planes, out, false, accumulate);
      }
  }
#else
  (void)dx, (void)dy, (void)w, (void)s, (void)workspace, (void)accumulate;
  CRUMB_FAIL("conv2d_backward_data_bf16: this build has no AVX512_BF16 kernels (check has_bf16_dot() first)");
#endif
}

template void conv2d_forward_bf16<float>(bf16*, const bf16*, const bf16*, const float*, const Conv2dShape&, bf16*, bool);
template void conv2d_forward_bf16<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const Conv2dShape&, bf16*, bool);

}  // namespace crumb::cpu
