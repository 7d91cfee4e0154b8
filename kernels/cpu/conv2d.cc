// conv2d on the CPU: three ways, picked per pass by the shape of one sample (never n, so the forward
// pass stays bitwise the same at every micro-batch size). Grouped convolutions go to conv2d_grouped.h.
// - Output maps of 4x4 and under (conv2d_small.h): one GEMM per output pixel over the taps inside the
//   image, samples as columns; up to 7x7 the forward of same-size maps, and the backward passes in
//   slices with enough samples.
// - Larger maps, strided ones from about 12x12 (conv2d_direct.h): implicit GEMMs over zero-padded
//   copies of each sample.
// - Everything else, 1x1 stride-1 convolutions and the data gradient of strided ones: im2col + GEMM,
//   below. Samples are split into contiguous slices, one per thread, each with its own column buffer in
//   the workspace; the GEMMs run single-threaded inside the slice. On feature maps of at least
//   kBlockColumns pixels each sample is one GEMM, which writes y / reads dy in NCHW directly (no scatter
//   or transpose pass) and keeps the column buffer in L2. On smaller maps a per-sample GEMM would be
//   nearly a matrix-vector product, so blocks of samples share one: their column matrices side by side,
//   y and dy gathered to and from [c_out, block]. Which samples share a block depends on the micro-batch
//   size and the thread split, so the forward GEMM on small maps is ordered_gemm, whose results do not
//   depend on the grouping. The other GEMMs run on its register tiles too, for their speed (Eigen packed
//   both operands of every per-sample GEMM and ran at 30-45% of the fma rate): the data gradient reads
//   w^T in place, the weight gradient a transposed copy of the column matrix.
// Stride-1 3x3 layers may run their forward and data-gradient passes as Winograd instead
// (conv2d_winograd.cc), where the caller chooses it.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include <omp.h>

#include "kernels/cpu/conv2d_direct.h"
#include "kernels/cpu/conv2d_grouped.h"
#include "kernels/cpu/conv2d_small.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/ordered_gemm.h"
#include "kernels/conv2d.h"

namespace crumb::cpu {
namespace {
using detail::assign;
using detail::CMatR;
using detail::copy_short;
using detail::for_each_block;
using detail::CVecMap;
using detail::ordered_gemm;
using detail::ordered_gemm_tn;
using detail::Range;
using detail::valid_range;
using detail::VecMap;

// The workspace holds at most this many slices; more threads than this idle in the conv kernels.
constexpr int kMaxSlices = 8;
// Elements of alignment a lean weight-gradient slice's scratch keeps (256 bytes of float, the arena's).
constexpr std::ptrdiff_t kLeanPhases = 64;
// Output pixels one GEMM should cover at least (the GEMM's n): below it, samples are blocked.
constexpr std::ptrdiff_t kBlockColumns = 128;
// The data gradient's blocks of samples are computed on rows padded to whole vectors (zero columns):
// rows of 147 or 98 columns (3 or 2 samples of 7x7) start anywhere in a cache line, and every vector
// load of the tiles split across two.
constexpr std::ptrdiff_t kRowLanes = 16;
std::ptrdiff_t padded_row(std::ptrdiff_t cols) { return (cols + kRowLanes - 1) / kRowLanes * kRowLanes; }
// The forward GEMM of a sample runs over panels of whole 48-column tiles whose rows fit in this much L2.
constexpr std::ptrdiff_t kPanelColumns = 48, kPanelBytes = 256 << 10;

struct Geom {
  std::ptrdiff_t k;      // rows of the column matrix: c_in * kh * kw
  std::ptrdiff_t hw;     // output pixels per channel
  std::ptrdiff_t x_len;  // elements of one input sample
  std::ptrdiff_t y_len;  // elements of one output sample
  bool pointwise;        // 1x1, stride 1, no padding: the input already is the column matrix
  bool small;            // conv2d_small.h: one GEMM per output pixel
  bool small_backward;   // conv2d_small_backward: so in slices of kSmallBackwardSamples or more
  bool direct;           // conv2d_direct.h (for this pass): no column matrix at all
  bool blocked;          // a map under kBlockColumns pixels: samples in blocks (by the map alone, never n)
  int block;             // samples per GEMM: 1 unblocked
  std::ptrdiff_t col;    // column buffer elements per slice ([k, block * hw])
  std::ptrdiff_t out;    // gathered y / dy elements per slice ([c_out, block * hw]; 0 unblocked)
  std::ptrdiff_t colt;   // the weight gradient's transposed column matrix ([block * hw, k]) per slice
  // The data gradient goes direct only at stride 1; each direct pass has its own workspace.
  Geom(const Conv2dShape& s, detail::ConvPass pass)
      : k(std::ptrdiff_t{s.c_in} * s.kh * s.kw),
        hw(std::ptrdiff_t{s.h_out} * s.w_out),
        x_len(std::ptrdiff_t{s.c_in} * s.h * s.w),
        y_len(std::ptrdiff_t{s.c_out} * hw),
        pointwise(s.kh == 1 && s.kw == 1 && s.stride_h == 1 && s.stride_w == 1 && s.pad_h == 0 && s.pad_w == 0),
        small(pass == detail::ConvPass::Forward ? detail::conv2d_small_forward(s) : detail::conv2d_small(s)),
        small_backward(!small && pass != detail::ConvPass::Forward && s.n >= detail::kSmallBackwardSamples &&
                       detail::conv2d_small_backward(s)),
        direct(!small && (pass == detail::ConvPass::Data ? detail::conv2d_direct_data(s) : detail::conv2d_direct(s))),
        blocked(!direct && !small && hw < kBlockColumns),
        block(!blocked ? 1 : static_cast<int>(std::min<std::ptrdiff_t>(s.n, (kBlockColumns + hw - 1) / hw))),
        col(std::max(direct  ? detail::direct_slice_len(s, pass)
                     : small ? small_len(s, pass)
                     : !blocked && pointwise ? 0
                                             : k * padded_row(block * hw),
                     small_backward ? small_len(s, pass) : 0)),
        out(!blocked ? 0 : std::ptrdiff_t{s.c_out} * padded_row(block * hw)),
        colt(pass == detail::ConvPass::Weight && !direct && !small ? k * block * hw : 0) {}
  std::ptrdiff_t slice_len() const { return col + out + colt; }
  static std::ptrdiff_t small_len(const Conv2dShape& s, detail::ConvPass pass) {
    return pass == detail::ConvPass::Weight ? detail::small_weight_slice_len(s) : detail::small_slice_len(s);
  }
  bool small_for(int i0, int i1) const {
    return small || (small_backward && i1 - i0 >= detail::kSmallBackwardSamples);
  }
};

int workspace_slices(const Conv2dShape& s) { return std::max(1, std::min(s.n, kMaxSlices)); }

int active_slices(const Conv2dShape& s, const Geom& g) {
  if (1.0 * s.n * s.c_out * g.k * g.hw < detail::kParallelMacs) return 1;
  return std::min(workspace_slices(s), omp_get_max_threads());
}

// Runs f(slice, first_sample, end_sample) for contiguous, non-empty sample ranges.
template <class F> void for_each_slice(int slices, int n, F&& f) {
  if (slices == 1) {
    f(0, 0, n);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int slice = 0; slice < slices; ++slice) f(slice, n * slice / slices, n * (slice + 1) / slices);
}

// Row r = (c, ki, kj) of a sample's column matrix, viewed as an h_out x w_out image, holds entry
// x[c, oh * stride_h - pad_h + ki, ow * stride_w - pad_w + kj] at (oh, ow), or 0 in the padding.
// Output rows [rows.lo, rows.hi) and columns [cols.lo, cols.hi) are the ones inside the image.
struct ColRow {
  std::ptrdiff_t r;  // row index in the column matrix
  int c, ki, kj;
  Range rows, cols;
};

template <class F> void for_each_col_row(const Conv2dShape& s, F&& f) {
  std::ptrdiff_t r = 0;
  for (int c = 0; c < s.c_in; ++c) {
    for (int ki = 0; ki < s.kh; ++ki) {
      const Range rows = valid_range(ki, s.stride_h, s.pad_h, s.h, s.h_out);
      for (int kj = 0; kj < s.kw; ++kj, ++r) {
        f(ColRow{r, c, ki, kj, rows, valid_range(kj, s.stride_w, s.pad_w, s.w, s.w_out)});
      }
    }
  }
}

// Plane index of the first input that column-matrix row cr copies: output (rows.lo, cols.lo).
std::ptrdiff_t first_input(const Conv2dShape& s, const ColRow& cr) {
  return (std::ptrdiff_t{cr.rows.lo} * s.stride_h - s.pad_h + cr.ki) * s.w +
         (std::ptrdiff_t{cr.cols.lo} * s.stride_w - s.pad_w + cr.kj);
}

// Stride-1 convs that keep the width ("same" padding, e.g. 3x3 pad 1) have a column-matrix row that
// is the input plane shifted by a constant offset, apart from the cells that wrap around a row edge.
// Those rows are copied (and added back) as one long run instead of one short run per image row.
bool is_flat(const Conv2dShape& s) { return s.stride_h == 1 && s.stride_w == 1 && s.w_out == s.w; }

// The flat run of column-matrix row cr: entries [lo, hi) map to plane entries [lo + shift, hi + shift),
// clipped to the plane; all entries outside the run are padding.
struct FlatRun {
  std::ptrdiff_t lo, hi, shift;
};

FlatRun flat_run(const Conv2dShape& s, const ColRow& cr) {
  const std::ptrdiff_t shift = std::ptrdiff_t{cr.ki - s.pad_h} * s.w + (cr.kj - s.pad_w);
  const std::ptrdiff_t plane = std::ptrdiff_t{s.h} * s.w;
  const std::ptrdiff_t first = std::ptrdiff_t{cr.rows.lo} * s.w, last = std::ptrdiff_t{cr.rows.hi} * s.w;
  // Clamped into the valid rows: on a plane smaller than the kernel's reach (a 3x3 kernel over 1x1) the
  // run is empty and must not reach past them.
  const std::ptrdiff_t lo = std::min(std::max(first, -shift), last);
  return {lo, std::max(lo, std::min(last, plane - shift)), shift};
}

// Calls f(index) for each entry of flat row cr (an h_out x w image) that the flat run maps across a
// row edge of the plane: these must read as padding.
template <class F> void for_each_wrapped(const Conv2dShape& s, const ColRow& cr, F&& f) {
  for (int oh = cr.rows.lo; oh < cr.rows.hi; ++oh) {
    const std::ptrdiff_t row = std::ptrdiff_t{oh} * s.w;
    for (int ow = 0; ow < cr.cols.lo; ++ow) f(row + ow);
    for (int ow = cr.cols.hi; ow < s.w; ++ow) f(row + ow);
  }
}

// Zeroes the few padding cells at a row edge; a plain loop would become a memset call.
template <class T> void zero_short(T* d, int n) {
  for (int j = 0; j < n; ++j) {
    T zero(0);
    std::memcpy(d + j, &zero, sizeof(T));
  }
}

// Row r of the column matrix starts at col + r * ld (ld = hw for one sample, more for a block of samples
// side by side).
template <class T> void im2col(const Conv2dShape& s, const T* x, T* col, std::ptrdiff_t ld) {
  const std::ptrdiff_t hw = std::ptrdiff_t{s.h_out} * s.w_out;
  for_each_col_row(s, [&](const ColRow& cr) {
    T* d = col + cr.r * ld;
    const T* xc = x + std::ptrdiff_t{cr.c} * s.h * s.w;
    std::fill(d, d + std::ptrdiff_t{cr.rows.lo} * s.w_out, T(0));
    std::fill(d + std::ptrdiff_t{cr.rows.hi} * s.w_out, d + hw, T(0));
    if (is_flat(s)) {
      const FlatRun run = flat_run(s, cr);
      std::fill(d + std::ptrdiff_t{cr.rows.lo} * s.w, d + run.lo, T(0));
      std::copy(xc + run.lo + run.shift, xc + run.hi + run.shift, d + run.lo);
      std::fill(d + run.hi, d + std::ptrdiff_t{cr.rows.hi} * s.w, T(0));
      for_each_wrapped(s, cr, [&](std::ptrdiff_t i) { d[i] = T(0); });
      return;
    }
    if (cr.cols.lo == cr.cols.hi) {
      std::fill(d + std::ptrdiff_t{cr.rows.lo} * s.w_out, d + std::ptrdiff_t{cr.rows.hi} * s.w_out, T(0));
      return;
    }
    // Locals only in the hot loop: the memcpys below may alias anything in memory, so fields read
    // through `s` or `cr` would be reloaded after every copy.
    const int lo = cr.cols.lo, len = cr.cols.hi - cr.cols.lo, tail = s.w_out - cr.cols.hi, stride_w = s.stride_w;
    const std::ptrdiff_t w_out = s.w_out, row_step = std::ptrdiff_t{s.stride_h} * s.w;
    const T* src = xc + first_input(s, cr);
    T* const end = d + cr.rows.hi * w_out;
    for (T* seg = d + cr.rows.lo * w_out; seg < end; seg += w_out, src += row_step) {
      zero_short(seg, lo);
      if (stride_w == 1) {
        copy_short(seg + lo, src, len);
      } else {
        for (int j = 0; j < len; ++j) seg[lo + j] = src[std::ptrdiff_t{j} * stride_w];
      }
      zero_short(seg + lo + len, tail);
    }
  });
}

// Adds the column matrix back onto the image (overlapping windows sum). Clobbers col: the wrapped
// entries of flat rows are zeroed so that the long run can be added without skipping them.
template <class T> void col2im_add(const Conv2dShape& s, T* col, std::ptrdiff_t ld, T* dx) {
  for_each_col_row(s, [&](const ColRow& cr) {
    T* d = col + cr.r * ld;
    T* dxc = dx + std::ptrdiff_t{cr.c} * s.h * s.w;
    if (is_flat(s)) {
      for_each_wrapped(s, cr, [&](std::ptrdiff_t i) { d[i] = T(0); });
      const FlatRun run = flat_run(s, cr);
      for (std::ptrdiff_t i = run.lo; i < run.hi; ++i) dxc[i + run.shift] += d[i];
      return;
    }
    if (cr.cols.lo == cr.cols.hi) return;
    const int lo = cr.cols.lo, len = cr.cols.hi - cr.cols.lo;
    const std::ptrdiff_t row_step = std::ptrdiff_t{s.stride_h} * s.w;
    std::ptrdiff_t in = first_input(s, cr);
    for (const T* seg = d + std::ptrdiff_t{cr.rows.lo} * s.w_out + lo; seg < d + std::ptrdiff_t{cr.rows.hi} * s.w_out;
         seg += s.w_out, in += row_step) {
      T* dst = dxc + in;
      if (s.stride_w == 1) {
        for (int j = 0; j < len; ++j) dst[j] += seg[j];
      } else {
        for (int j = 0; j < len; ++j) dst[std::ptrdiff_t{j} * s.stride_w] += seg[j];
      }
    }
  });
}

// The [k, hw] column matrix of sample x_i: x_i itself for pointwise convs, else im2col'd into col.
template <class T> CMatR<T> columns(const Conv2dShape& s, const Geom& g, const T* x_i, T* col) {
  if (g.pointwise) return CMatR<T>(x_i, g.k, g.hw);
  im2col(s, x_i, col, g.hw);
  return CMatR<T>(col, g.k, g.hw);
}

// The [k, count * hw] column matrix of samples x_0 .. x_{count-1} side by side, in col.
template <class T> CMatR<T> block_columns(const Conv2dShape& s, const Geom& g, const T* x, int count, T* col) {
  const std::ptrdiff_t ld = count * g.hw;
  for (int j = 0; j < count; ++j) {
    const T* x_j = x + j * g.x_len;
    if (g.pointwise) {
      for (std::ptrdiff_t r = 0; r < g.k; ++r) std::copy(x_j + r * g.hw, x_j + (r + 1) * g.hw, col + r * ld + j * g.hw);
    } else {
      im2col(s, x_j, col + j * g.hw, ld);
    }
  }
  return CMatR<T>(col, g.k, ld);
}

// [rows, count * hw] block (rows ld apart) <-> count NCHW samples of [rows, hw] (sample stride len).
template <class T>
void gather(T* block, std::ptrdiff_t ld, const T* v, std::ptrdiff_t rows, const Geom& g, int count, std::ptrdiff_t len) {
  for (int j = 0; j < count; ++j)
    for (std::ptrdiff_t r = 0; r < rows; ++r)
      std::copy(v + j * len + r * g.hw, v + j * len + (r + 1) * g.hw, block + r * ld + j * g.hw);
}

}  // namespace

std::size_t conv2d_forward_workspace(const Conv2dShape& s) {
  if (s.groups > 1) return detail::grouped_forward_workspace(s);
  return static_cast<std::size_t>(workspace_slices(s) * Geom(s, detail::ConvPass::Forward).slice_len());
}

// The direct path's flipped weights go after the slices.
std::size_t conv2d_backward_data_workspace(const Conv2dShape& s) {
  if (s.groups > 1) return detail::grouped_backward_data_workspace(s);
  const Geom g(s, detail::ConvPass::Data);
  return static_cast<std::size_t>(workspace_slices(s) * g.slice_len() + (g.direct ? detail::direct_shared_len(s) : 0));
}

// Slice 0 accumulates straight into dw/db; the others into partial sums folded in at the end, or (lean)
// one slice at a time, in one slice's scratch (kLeanPhases elements of room for its phase: run_slices)
// and one partial sum. Small maps (conv2d_small.h) sum only the live taps: each slice's sums stay in its
// scratch and are added up there (lean: into one running sum), and a partial is the bias gradient alone;
// dw, mostly zeros on such maps, is written once.
std::size_t conv2d_backward_weight_workspace(const Conv2dShape& s) {
  if (s.groups > 1) return detail::grouped_backward_weight_workspace(s);
  const Geom g(s, detail::ConvPass::Weight);
  const int slices = workspace_slices(s);
  const std::ptrdiff_t partial = g.small ? s.c_out : s.c_out * g.k + s.c_out;
  const std::ptrdiff_t partials = (s.lean ? std::min(1, slices - 1) : slices - 1) * partial;
  const std::ptrdiff_t running = s.lean && g.small ? detail::small_taps_len(s) : 0;
  return static_cast<std::size_t>((s.lean ? g.slice_len() + kLeanPhases : slices * g.slice_len()) + running + partials);
}

namespace {
// The ReLU epilogue over `count` values just stored (relu_forward's rule: NaN propagates, -0 becomes 0).
template <class T> void clamp(T* y, std::ptrdiff_t count) {
#pragma omp simd
  for (std::ptrdiff_t i = 0; i < count; ++i) y[i] = y[i] <= T(0) ? T(0) : y[i];
}
}  // namespace

template <class T>
void conv2d_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, T* workspace, bool relu) {
  if (s.groups > 1) {
    detail::grouped_forward(y, x, w, b, s, workspace);
    if (relu) clamp(y, std::ptrdiff_t{s.n} * s.c_out * s.h_out * s.w_out);
    return;
  }
  const Geom g(s, detail::ConvPass::Forward);
  for_each_slice(active_slices(s, g), s.n, [&](int slice, int i0, int i1) {
    T* col = workspace + slice * g.slice_len();
    if (g.direct || g.small) {
      if (g.direct) detail::direct_forward(y, x, w, b, s, i0, i1, col);
      else detail::small_forward(y, x, w, b, s, i0, i1, col);
      if (relu) clamp(y + i0 * g.y_len, (i1 - i0) * g.y_len);
      return;
    }
    if (g.blocked) {
      T* out = col + g.col;
      for (int i = i0; i < i1; i += g.block) {
        const int count = std::min(g.block, i1 - i);
        const std::ptrdiff_t ld = count * g.hw;
        block_columns(s, g, x + i * g.x_len, count, col);
        ordered_gemm(out, ld, w, g.k, col, ld, s.c_out, ld, g.k, b);
        if (relu) clamp(out, s.c_out * ld);
        for (int j = 0; j < count; ++j)  // scatter back to NCHW
          for (int co = 0; co < s.c_out; ++co)
            std::copy(out + co * ld + j * g.hw, out + co * ld + (j + 1) * g.hw, y + (i + j) * g.y_len + co * g.hw);
      }
      return;
    }
    // ordered_gemm's 8 x 48 register tiles (16 x 8 lanes on AVX2), not Eigen's: on 1x1 and strided
    // layers Eigen packed both operands of every per-sample GEMM and ran at 20-50% of the fma rate. In
    // panels of columns whose k rows stay in L2 while every row block passes over them (a 56x56 map of
    // 256 channels is 3 MiB); each entry's fma sequence is the same in any panel.
    const std::ptrdiff_t panel = std::max<std::ptrdiff_t>(kPanelColumns, kPanelBytes / (g.k * std::ptrdiff_t{sizeof(T)}) /
                                                                            kPanelColumns * kPanelColumns);
    for (int i = i0; i < i1; ++i) {
      const T* X = columns(s, g, x + i * g.x_len, col).data();
      for (std::ptrdiff_t j = 0; j < g.hw; j += panel)
        ordered_gemm(y + i * g.y_len + j, g.hw, w, g.k, X + j, g.hw, s.c_out, std::min(panel, g.hw - j), g.k, b);
      if (relu) clamp(y + i * g.y_len, g.y_len);
    }
  });
}

template <class T>
void conv2d_backward_data(T* dx, const T* dy, const T* w, const Conv2dShape& s, T* workspace, bool accumulate) {
  if (s.groups > 1) return detail::grouped_backward_data(dx, dy, w, s, workspace, accumulate);
  const Geom g(s, detail::ConvPass::Data);
  T* flipped = workspace + workspace_slices(s) * g.slice_len();
  if (g.direct) detail::direct_flip_weights(flipped, w, s);
  for_each_slice(active_slices(s, g), s.n, [&](int slice, int i0, int i1) {
    T* ws = workspace + slice * g.slice_len();
    if (g.small_for(i0, i1)) return detail::small_backward_data(dx, dy, w, s, i0, i1, ws, accumulate);
    if (g.direct) return detail::direct_backward_data(dx, dy, flipped, s, i0, i1, ws, accumulate);
    if (g.blocked) {
      T* dcol = workspace + slice * g.slice_len();
      T* dyb = dcol + g.col;
      for (int i = i0; i < i1; i += g.block) {
        const int count = std::min(g.block, i1 - i);
        const std::ptrdiff_t ld = padded_row(count * g.hw);
        gather(dyb, ld, dy + i * g.y_len, s.c_out, g, count, g.y_len);
        for (std::ptrdiff_t r = 0; r < s.c_out; ++r) std::fill(dyb + r * ld + count * g.hw, dyb + (r + 1) * ld, T(0));
        for_each_block<T>(g.k, ld, s.c_out, false, [&](auto p0, auto p1, auto c0, auto c1, bool from_dst) {
          ordered_gemm_tn(dcol + c0, ld, w + p0 * g.k, g.k, dyb + p0 * ld + c0, ld, g.k, c1 - c0, p1 - p0, from_dst);
        });
        for (int j = 0; j < count; ++j) {
          T* dx_j = dx + (i + j) * g.x_len;
          if (!accumulate) std::fill(dx_j, dx_j + g.x_len, T(0));
          if (g.pointwise) {
            for (std::ptrdiff_t r = 0; r < g.k; ++r)
              VecMap<T>(dx_j + r * g.hw, g.hw) += CVecMap<T>(dcol + r * ld + j * g.hw, g.hw);
          } else {
            col2im_add(s, dcol + j * g.hw, ld, dx_j);
          }
        }
      }
      return;
    }
    // A pointwise layer's column gradient is dx itself.
    T* dcol = workspace + slice * g.slice_len();
    for (int i = i0; i < i1; ++i) {
      const T* dy_i = dy + i * g.y_len;
      T* dx_i = dx + i * g.x_len;
      T* out = g.pointwise ? dx_i : dcol;
      for_each_block<T>(g.k, g.hw, s.c_out, g.pointwise && accumulate,
                        [&](auto p0, auto p1, auto c0, auto c1, bool from_dst) {
                          ordered_gemm_tn(out + c0, g.hw, w + p0 * g.k, g.k, dy_i + p0 * g.hw + c0, g.hw, g.k, c1 - c0,
                                          p1 - p0, from_dst);
                        });
      if (g.pointwise) continue;
      if (!accumulate) std::fill(dx_i, dx_i + g.x_len, T(0));
      col2im_add(s, dcol, g.hw, dx_i);
    }
  });
}

namespace {
// dst += src elementwise, threaded where it pays (the same bits on any split).
template <class T> void add_into(T* dst, const T* src, std::ptrdiff_t n) {
  detail::parallel_ranges(n, static_cast<double>(n),
                          [&](std::ptrdiff_t b, std::ptrdiff_t e) { VecMap<T>(dst + b, e - b) += CVecMap<T>(src + b, e - b); });
}

// The weight gradient's slices: run(slice, i0, i1, scratch) for each, then fold(slice, scratch) for each in
// slice order; in parallel, each slice in its own scratch, or (lean) one after another on this thread in one
// slice's scratch, starting where its own would modulo kLeanPhases elements (Eigen's vectorised sums over
// it then begin at the same alignment, so they add in the same order), each folded as soon as it is done.
template <class T, class Run, class Fold>
void run_slices(const Conv2dShape& s, const Geom& g, int slices, T* workspace, Run&& run, Fold&& fold) {
  if (s.lean) {
    for (int slice = 0; slice < slices; ++slice) {
      T* scratch = workspace + slice * g.slice_len() % kLeanPhases;
      run(slice, s.n * slice / slices, s.n * (slice + 1) / slices, scratch);
      fold(slice, scratch);
    }
    return;
  }
  for_each_slice(slices, s.n, [&](int slice, int i0, int i1) { run(slice, i0, i1, workspace + slice * g.slice_len()); });
  for (int slice = 0; slice < slices; ++slice) fold(slice, workspace + slice * g.slice_len());
}

// Small maps' weight gradient (conv2d_backward_weight_workspace says how the workspace is laid out): the
// live taps' sums are added slice by slice in slice order, then written into dw (=|+=) once.
template <class T>
void small_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, const Geom& g, T* workspace,
                           bool accumulate) {
  const std::ptrdiff_t taps_len = detail::small_taps_len(s), sums = detail::small_slice_len(s);
  T* db_partials = workspace + (s.lean ? g.slice_len() + kLeanPhases + taps_len : workspace_slices(s) * g.slice_len());
  auto db_partial = [&](int slice) { return db_partials + (s.lean ? 0 : (slice - 1) * s.c_out); };
  // Slice 0's sums, which the others' are added into: its own (lean: a copy, its scratch being reused).
  T* sum = s.lean ? workspace + g.slice_len() + kLeanPhases : workspace + sums;
  run_slices(
      s, g, active_slices(s, g), workspace,
      [&](int slice, int i0, int i1, T* scratch) {
        detail::small_weight_taps(scratch + sums, !db ? nullptr : slice == 0 ? db : db_partial(slice), dy, x, s, i0, i1,
                                  scratch, slice == 0 && accumulate);
      },
      [&](int slice, T* scratch) {
        if (slice == 0) {
          if (s.lean) std::copy(scratch + sums, scratch + sums + taps_len, sum);
          return;
        }
        add_into(sum, scratch + sums, taps_len);
        if (db) VecMap<T>(db, s.c_out) += CVecMap<T>(db_partial(slice), s.c_out);
      });
  detail::small_weight_store(dw, sum, s, accumulate);
}
}  // namespace

template <class T>
void conv2d_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, T* workspace,
                            bool accumulate) {
  if (s.groups > 1) return detail::grouped_backward_weight(dw, db, dy, x, s, workspace, accumulate);
  const Geom g(s, detail::ConvPass::Weight);
  if (g.small) return small_backward_weight(dw, db, dy, x, s, g, workspace, accumulate);
  const std::ptrdiff_t dw_len = s.c_out * g.k;
  const std::ptrdiff_t partial_len = dw_len + s.c_out;
  T* partials = workspace + (s.lean ? g.slice_len() + kLeanPhases : workspace_slices(s) * g.slice_len());
  auto fold = [&](const T* p) {
    add_into(dw, p, dw_len);
    if (db) VecMap<T>(db, s.c_out) += CVecMap<T>(p + dw_len, s.c_out);
  };
  // dw_s (=|+=) dy_b [c_out, depth] * cols [k, depth]^T, cols transposed into colt (dot products along
  // both rows, dot_gemm, ran 42-51% of the fma peak on ResNet-50's 1x1 layers, this 50-74%).
  auto weight_gemm = [&](T* dw_s, const T* dy_b, const CMatR<T>& cols, T* colt, bool acc) {
    const std::ptrdiff_t depth = cols.cols();
    detail::transpose_into(colt, g.k, cols.data(), depth, g.k, depth);
    for_each_block<T>(s.c_out, g.k, depth, acc, [&](auto p0, auto p1, auto c0, auto c1, bool from_dst) {
      ordered_gemm(dw_s + c0, g.k, dy_b + p0, depth, colt + p0 * g.k + c0, g.k, s.c_out, c1 - c0, p1 - p0,
                   static_cast<const T*>(nullptr), from_dst);
    });
  };
  auto run_slice = [&](int slice, int i0, int i1, T* col, T* dw_s) {
    T* db_s = !db ? nullptr : slice == 0 ? db : dw_s + dw_len;
    bool acc = slice == 0 && accumulate;
    if (g.small_for(i0, i1)) return detail::small_backward_weight(dw_s, db_s, dy, x, s, i0, i1, col, acc);
    if (g.direct) return detail::direct_backward_weight(dw_s, db_s, dy, x, s, i0, i1, col, acc);
    T* colt = col + g.col + g.out;
    if (g.blocked) {
      T* dyb = col + g.col;
      for (int i = i0; i < i1; i += g.block, acc = true) {
        const int count = std::min(g.block, i1 - i);
        const std::ptrdiff_t ld = count * g.hw;
        gather(dyb, ld, dy + i * g.y_len, s.c_out, g, count, g.y_len);
        weight_gemm(dw_s, dyb, block_columns(s, g, x + i * g.x_len, count, col), colt, acc);
        if (db_s) assign(VecMap<T>(db_s, s.c_out), CMatR<T>(dyb, s.c_out, ld).rowwise().sum(), acc);
      }
      return;
    }
    for (int i = i0; i < i1; ++i, acc = true) {
      const T* dy_i = dy + i * g.y_len;
      weight_gemm(dw_s, dy_i, columns(s, g, x + i * g.x_len, col), colt, acc);
      if (db_s) assign(VecMap<T>(db_s, s.c_out), CMatR<T>(dy_i, s.c_out, g.hw).rowwise().sum(), acc);
    }
  };
  auto partial = [&](int slice) { return partials + (s.lean ? 0 : (slice - 1) * partial_len); };
  run_slices(
      s, g, active_slices(s, g), workspace,
      [&](int slice, int i0, int i1, T* col) { run_slice(slice, i0, i1, col, slice == 0 ? dw : partial(slice)); },
      [&](int slice, T*) {
        if (slice > 0) fold(partial(slice));
      });
}

#define CRUMB_INSTANTIATE(T)                                                                               \
  template void conv2d_forward<T>(T*, const T*, const T*, const T*, const Conv2dShape&, T*, bool);       \
  template void conv2d_backward_data<T>(T*, const T*, const T*, const Conv2dShape&, T*, bool);           \
  template void conv2d_backward_weight<T>(T*, T*, const T*, const T*, const Conv2dShape&, T*, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
