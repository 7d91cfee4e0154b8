// Winograd F(2x2, 3x3) for stride-1 3x3 convolutions (Lavin & Gray 2015): each 2x2 block of outputs
// (a tile) comes from a 4x4 block of inputs through 16 multiplies per (input, output) channel pair instead
// of 36. Per tile and channel the 4x4 input block d becomes V = B^T d B, each 3x3 filter g becomes
// U = G g G^T, and the 2x2 outputs are A^T M A with M[xi][k] = sum over c of U[xi][k][c] * V[xi][c]: one
// GEMM per transformed position xi (16 of them, [k, c] x [c, tiles]).
//
// B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
// A^T = [1 1 1 0; 0 1 -1 -1]. G's halves are exact; the transforms' additions are where the rounding
// differs from the direct convolution's (docs/architecture.md, Kernels: a few float32 ulps of the sums of
// |terms|, measured in tests/kernels_test.cc).
//
// The data gradient of a stride-1 convolution is the full correlation of dy with the flipped, transposed
// filters, so both passes are one correlation over a padded image (Pass below). Every output is computed
// the same way whatever the batch size or the grouping of tiles into chunks: the transforms are per tile
// and the GEMMs are ordered_gemm's, so the forward pass stays bitwise the same at every micro-batch size.
#include <algorithm>

#include <omp.h>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/ordered_gemm.h"
#include "kernels/conv2d.h"

namespace crumb::cpu {
namespace {
using detail::kParallelMacs;
using detail::ordered_gemm;


constexpr int kXi = 16;  // transformed positions per tile (4x4)
// Each chunk of tiles keeps its transformed inputs and products within this many bytes (half an L2),
// but has at least kMinChunkTiles tiles so that the GEMMs run on whole register tiles.
constexpr std::ptrdiff_t kChunkBytes = 512 << 10, kMinChunkTiles = 96;
constexpr int kMaxSlices = 8;  // as conv2d.cc's: more threads than this idle
// The 16 planes of V and of M are this many elements further apart than their size: the transforms
// stream all 16 at once, and planes a multiple of 4 KiB apart would fall into one L1 set (measured: the
// transforms ran at a third of their speed on 16-channel layers).
constexpr std::ptrdiff_t kPlanePad = 16;

constexpr std::ptrdiff_t kLanes = 16;  // floats in a 64-byte vector
std::ptrdiff_t round_up(std::ptrdiff_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// One correlation: `in` [c, h, w] zero-padded by pad_h, pad_w (and as much as the tiles need on the far
// sides) under a 3x3 kernel, out [k, h_out, w_out].
struct Pass {
  int c, k, h, w, pad_h, pad_w, h_out, w_out;
  int tiles_h() const { return (h_out + 1) / 2; }
  int tiles_w() const { return (w_out + 1) / 2; }
  std::ptrdiff_t tiles() const { return std::ptrdiff_t{tiles_h()} * tiles_w(); }
  // The padded image: rows 2 * tiles_h + 2 of 2 * tiles_w + 2 columns, as far as the tiles reach.
  std::ptrdiff_t padded_w() const { return 2 * std::ptrdiff_t{tiles_w()} + 2; }
  std::ptrdiff_t plane() const { return std::ptrdiff_t{2 * tiles_h() + 2} * padded_w(); }
  std::ptrdiff_t padded() const { return std::ptrdiff_t{c} * plane(); }
  // A chunk is whole samples (rows == tiles_h) or some tile rows of one sample.
  int chunk_rows() const {
    const std::ptrdiff_t by_bytes = kChunkBytes / (std::ptrdiff_t{kXi} * (c + k) * 4);
    const std::ptrdiff_t want = std::max(by_bytes, kMinChunkTiles);
    return static_cast<int>(std::clamp<std::ptrdiff_t>(want / tiles_w(), 1, tiles_h()));
  }
  int chunk_samples() const {
    if (chunk_rows() < tiles_h()) return 1;
    const std::ptrdiff_t by_bytes = kChunkBytes / (std::ptrdiff_t{kXi} * (c + k) * 4);
    return static_cast<int>(std::max<std::ptrdiff_t>(1, std::max(by_bytes, kMinChunkTiles) / tiles()));
  }
  // The GEMMs' columns: a chunk's tiles rounded up to whole 64-byte vectors (the ordered GEMM's narrow
  // tails run lane by lane, which on 42 tiles took most of its time); the extra columns are computed
  // from zeros and dropped.
  std::ptrdiff_t chunk_tiles() const { return round_up(std::ptrdiff_t{chunk_samples()} * chunk_rows() * tiles_w()); }
  // Per slice: padded image, V [16, c, chunk], M [16, k, chunk] (planes v_plane, m_plane apart), two
  // output rows.
  std::ptrdiff_t v_plane() const { return c * chunk_tiles() + kPlanePad; }
  std::ptrdiff_t m_plane() const { return k * chunk_tiles() + kPlanePad; }
  std::ptrdiff_t slice_len() const { return padded() + kXi * (v_plane() + m_plane()) + 4 * std::ptrdiff_t{tiles_w()}; }
  std::ptrdiff_t in_len() const { return std::ptrdiff_t{c} * h * w; }
  std::ptrdiff_t out_len() const { return std::ptrdiff_t{k} * h_out * w_out; }
};

Pass forward_pass(const Conv2dShape& s) { return {s.c_in, s.c_out, s.h, s.w, s.pad_h, s.pad_w, s.h_out, s.w_out}; }
Pass data_pass(const Conv2dShape& s) {
  return {s.c_out, s.c_in, s.h_out, s.w_out, 2 - s.pad_h, 2 - s.pad_w, s.h, s.w};
}

int slices(const Conv2dShape& s) { return std::max(1, std::min(s.n, kMaxSlices)); }

// u[xi, o, i] = (G g G^T)[xi] for the 3x3 filter g(a, b) = at(o, i, a, b).
template <class T, class At> void transform_filters(T* u, int outs, int ins, At at) {
  const std::ptrdiff_t plane = std::ptrdiff_t{outs} * ins;
  for (int o = 0; o < outs; ++o)
    for (int i = 0; i < ins; ++i) {
      T gg[4][3];  // G g
      for (int b = 0; b < 3; ++b) {
        const T g0 = at(o, i, 0, b), g1 = at(o, i, 1, b), g2 = at(o, i, 2, b);
        gg[0][b] = g0;
        gg[1][b] = T(0.5) * (g0 + g1 + g2);
        gg[2][b] = T(0.5) * (g0 - g1 + g2);
        gg[3][b] = g2;
      }
      for (int r = 0; r < 4; ++r) {
        const T g0 = gg[r][0], g1 = gg[r][1], g2 = gg[r][2];
        T* d = u + std::ptrdiff_t{o} * ins + i + (4 * r) * plane;
        d[0] = g0;
        d[plane] = T(0.5) * (g0 + g1 + g2);
        d[2 * plane] = T(0.5) * (g0 - g1 + g2);
        d[3 * plane] = g2;
      }
    }
}

// Copies sample src [c, h, w] into the interior of the padded planes; the borders stay zero (they are the
// same cells for every sample).
template <class T> void fill_padded(T* p, const T* src, const Pass& q) {
  const std::ptrdiff_t plane = q.plane(), pw = q.padded_w();
  const int h = q.h, w = q.w;
  T* d = p + std::ptrdiff_t{q.pad_h} * pw + q.pad_w;
  for (int ch = 0; ch < q.c; ++ch, d += plane)
    for (int r = 0; r < h; ++r, src += w) std::copy(src, src + w, d + r * pw);
}

// V[xi, ch, at + tx] = (B^T d B)[xi] of tile (ty, tx) of the padded sample, for tile rows [ty0, ty1).
template <class T>
void transform_input(T* v, std::ptrdiff_t ldv, std::ptrdiff_t plane, const T* p, const Pass& q, int ty0, int ty1) {
  const std::ptrdiff_t pw = q.padded_w();
  const int tw = q.tiles_w();
  for (int ch = 0; ch < q.c; ++ch) {
    const T* chan = p + ch * q.plane();
    for (int ty = ty0; ty < ty1; ++ty) {
      T* dst = v + std::ptrdiff_t{ch} * ldv + std::ptrdiff_t{ty - ty0} * tw;
      const T *s0 = chan + std::ptrdiff_t{2 * ty} * pw, *s1 = s0 + pw, *s2 = s1 + pw, *s3 = s2 + pw;
#pragma omp simd
      for (int tx = 0; tx < tw; ++tx) {
        // d B per row: columns (d0 - d2, d1 + d2, d2 - d1, d1 - d3), d0..d3 = the row's 2 tx .. 2 tx + 3.
        const T a0 = s0[2 * tx] - s0[2 * tx + 2], a1 = s0[2 * tx + 1] + s0[2 * tx + 2], a2 = s0[2 * tx + 2] - s0[2 * tx + 1],
                a3 = s0[2 * tx + 1] - s0[2 * tx + 3];
        const T b0 = s1[2 * tx] - s1[2 * tx + 2], b1 = s1[2 * tx + 1] + s1[2 * tx + 2], b2 = s1[2 * tx + 2] - s1[2 * tx + 1],
                b3 = s1[2 * tx + 1] - s1[2 * tx + 3];
        const T c0 = s2[2 * tx] - s2[2 * tx + 2], c1 = s2[2 * tx + 1] + s2[2 * tx + 2], c2 = s2[2 * tx + 2] - s2[2 * tx + 1],
                c3 = s2[2 * tx + 1] - s2[2 * tx + 3];
        const T d0 = s3[2 * tx] - s3[2 * tx + 2], d1 = s3[2 * tx + 1] + s3[2 * tx + 2], d2 = s3[2 * tx + 2] - s3[2 * tx + 1],
                d3 = s3[2 * tx + 1] - s3[2 * tx + 3];
        // B^T on the rows (a, b, c, d): a - c, b + c, c - b, b - d.
        dst[tx] = a0 - c0, dst[plane + tx] = a1 - c1, dst[2 * plane + tx] = a2 - c2, dst[3 * plane + tx] = a3 - c3;
        dst[4 * plane + tx] = b0 + c0, dst[5 * plane + tx] = b1 + c1, dst[6 * plane + tx] = b2 + c2;
        dst[7 * plane + tx] = b3 + c3;
        dst[8 * plane + tx] = c0 - b0, dst[9 * plane + tx] = c1 - b1, dst[10 * plane + tx] = c2 - b2;
        dst[11 * plane + tx] = c3 - b3;
        dst[12 * plane + tx] = b0 - d0, dst[13 * plane + tx] = b1 - d1, dst[14 * plane + tx] = b2 - d2;
        dst[15 * plane + tx] = b3 - d3;
      }
    }
  }
}

// out (=|+=) A^T M A (+ bias) for tile rows [ty0, ty1) of one sample; M[xi, ko, at + tx].
template <class T>
void transform_output(T* out, const T* m, std::ptrdiff_t ldm, std::ptrdiff_t plane, const T* bias, const Pass& q, int ty0,
                      int ty1, T* rows, bool accumulate) {
  const std::ptrdiff_t hw = std::ptrdiff_t{q.h_out} * q.w_out;
  const int tw = q.tiles_w(), w_out = q.w_out;
  T* row0 = rows;
  T* row1 = rows + 2 * tw;
  for (int ko = 0; ko < q.k; ++ko) {
    const T b = bias ? bias[ko] : T(0);
    for (int ty = ty0; ty < ty1; ++ty) {
      const T* s = m + std::ptrdiff_t{ko} * ldm + std::ptrdiff_t{ty - ty0} * tw;
#pragma omp simd
      for (int tx = 0; tx < tw; ++tx) {
        T v[16];
        for (int xi = 0; xi < 16; ++xi) v[xi] = s[xi * plane + tx];
        // A^T on the rows: r0 = m0 + m1 + m2, r1 = m1 - m2 - m3 (per column); then on the columns.
        const T r00 = v[0] + v[4] + v[8], r01 = v[1] + v[5] + v[9], r02 = v[2] + v[6] + v[10], r03 = v[3] + v[7] + v[11];
        const T r10 = v[4] - v[8] - v[12], r11 = v[5] - v[9] - v[13], r12 = v[6] - v[10] - v[14],
                r13 = v[7] - v[11] - v[15];
        row0[2 * tx] = r00 + r01 + r02 + b;
        row0[2 * tx + 1] = r01 - r02 - r03 + b;
        row1[2 * tx] = r10 + r11 + r12 + b;
        row1[2 * tx + 1] = r11 - r12 - r13 + b;
      }
      T* dst = out + ko * hw + std::ptrdiff_t{2 * ty} * w_out;
      const int n_rows = std::min(2, q.h_out - 2 * ty);
      for (int r = 0; r < n_rows; ++r, dst += w_out) {
        const T* src = r == 0 ? row0 : row1;
        if (accumulate) {
          for (int j = 0; j < w_out; ++j) dst[j] += src[j];
        } else {
          std::copy(src, src + w_out, dst);
        }
      }
    }
  }
}

// Samples [i0, i1) of the pass, with u the transformed filters [16, k, c] and ws the slice's workspace.
template <class T>
void correlate(T* out, const T* in, const T* u, const T* bias, const Pass& q, int i0, int i1, T* ws, bool accumulate) {
  T* padded = ws;
  T* v = padded + q.padded();
  const std::ptrdiff_t ld = q.chunk_tiles();
  const std::ptrdiff_t vp = q.v_plane(), mp = q.m_plane();
  T* m = v + kXi * vp;
  T* rows = m + kXi * mp;
  std::fill(padded, rows, T(0));
  const int th = q.tiles_h(), tw = q.tiles_w(), rows_per = q.chunk_rows(), samples_per = q.chunk_samples();
  auto gemms = [&](std::ptrdiff_t n) {
    for (int xi = 0; xi < kXi; ++xi)
      ordered_gemm(m + xi * mp, ld, u + std::ptrdiff_t{xi} * q.k * q.c, q.c, v + xi * vp, ld, q.k, n, q.c,
                   static_cast<const T*>(nullptr));
  };
  if (rows_per < th) {  // tile rows of one sample per chunk
    for (int i = i0; i < i1; ++i) {
      fill_padded(padded, in + i * q.in_len(), q);
      for (int ty = 0; ty < th; ty += rows_per) {
        const int ty1 = std::min(th, ty + rows_per);
        transform_input(v, ld, vp, padded, q, ty, ty1);
        gemms(round_up(std::ptrdiff_t{ty1 - ty} * tw));
        transform_output(out + i * q.out_len(), m, ld, mp, bias, q, ty, ty1, rows, accumulate);
      }
    }
    return;
  }
  for (int i = i0; i < i1; i += samples_per) {  // whole samples per chunk, side by side
    const int count = std::min(samples_per, i1 - i);
    for (int j = 0; j < count; ++j) {
      fill_padded(padded, in + (i + j) * q.in_len(), q);
      transform_input(v + j * q.tiles(), ld, vp, padded, q, 0, th);
    }
    gemms(round_up(count * q.tiles()));
    for (int j = 0; j < count; ++j)
      transform_output(out + (i + j) * q.out_len(), m + j * q.tiles(), ld, mp, bias, q, 0, th, rows, accumulate);
  }
}

template <class T, class F> void run_slices(const Conv2dShape& s, F&& f) {
  const int count = std::min(slices(s), omp_get_max_threads());
  if (count == 1 || 9.0 * s.n * s.c_in * s.c_out * s.h_out * s.w_out < kParallelMacs) return f(0, 0, s.n);
#pragma omp parallel for schedule(static)
  for (int slice = 0; slice < count; ++slice) f(slice, s.n * slice / count, s.n * (slice + 1) / count);
}

}  // namespace

bool conv2d_winograd_applies(const Conv2dShape& s) {
  return s.groups == 1 && s.kh == 3 && s.kw == 3 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h <= 2 &&
         s.pad_w <= 2 && s.h_out >= 1 && s.w_out >= 1;
}

std::size_t winograd_forward_workspace(const Conv2dShape& s) {
  return static_cast<std::size_t>(kXi * std::ptrdiff_t{s.c_in} * s.c_out + slices(s) * forward_pass(s).slice_len());
}

std::size_t winograd_backward_data_workspace(const Conv2dShape& s) {
  return static_cast<std::size_t>(kXi * std::ptrdiff_t{s.c_in} * s.c_out + slices(s) * data_pass(s).slice_len());
}

template <class T>
void winograd_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, T* workspace) {
  const Pass q = forward_pass(s);
  T* u = workspace;
  T* slice_ws = u + kXi * std::ptrdiff_t{s.c_in} * s.c_out;
  transform_filters(u, s.c_out, s.c_in,
                    [&](int o, int i, int a, int c) { return w[(std::ptrdiff_t{o} * s.c_in + i) * 9 + a * 3 + c]; });
  run_slices<T>(s, [&](int slice, int i0, int i1) {
    correlate(y, x, u, b, q, i0, i1, slice_ws + slice * q.slice_len(), false);
  });
}

// The full correlation of dy with wf[ci, co, a, b] = w[co, ci, 2 - a, 2 - b].
template <class T>
void winograd_backward_data(T* dx, const T* dy, const T* w, const Conv2dShape& s, T* workspace, bool accumulate) {
  const Pass q = data_pass(s);
  T* u = workspace;
  T* slice_ws = u + kXi * std::ptrdiff_t{s.c_in} * s.c_out;
  transform_filters(u, s.c_in, s.c_out, [&](int ci, int co, int a, int c) {
    return w[(std::ptrdiff_t{co} * s.c_in + ci) * 9 + (2 - a) * 3 + (2 - c)];
  });
  run_slices<T>(s, [&](int slice, int i0, int i1) {
    correlate(dx, dy, u, static_cast<const T*>(nullptr), q, i0, i1, slice_ws + slice * q.slice_len(), accumulate);
  });
}

#define CRUMB_INSTANTIATE(T)                                                                        \
  template void winograd_forward<T>(T*, const T*, const T*, const T*, const Conv2dShape&, T*);      \
  template void winograd_backward_data<T>(T*, const T*, const T*, const Conv2dShape&, T*, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
