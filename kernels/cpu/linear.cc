// The three GEMMs on ordered_gemm's register tiles. The forward and the data gradient multiply by the
// weight from the right ([in, out] and [out, in]); it goes through the workspace once per call, cut into
// panels of columns, each panel contiguous (the forward's transposed on the way; the data gradient's a
// chunk of panels at a time, so its workspace stays small beside a large weight): a panel's rows then
// stay in L2 and in a few pages while every row block of the left-hand side passes over them, where the
// weight read in place (2560 x 2560 is 26 MB, 10 KB between rows) ran at half the rate. The weight
// gradient reads both operands in place. Every output entry is one fixed sequence of fmas, so the
// forward pass gives the same bits for a sample whatever the micro-batch it runs in and however the
// threads split it. Threads split the larger dimension of the output, each running its own
// single-threaded tiles.
#include <omp.h>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/ordered_gemm.h"
#include "kernels/linear.h"

namespace crumb::cpu {
using detail::CMatR;
using detail::ordered_gemm;
using detail::ordered_gemm_tn;
using detail::parallel_ranges;
using detail::VecMap;

// Fewer samples than output features: the forward as y^T = w x^T + b, with copies of x and y in place
// of w's, which at 8 samples cost more than the multiply-adds. Their rows are padded to whole vectors
// (zero columns, dropped): 8 columns would otherwise go through ordered_gemm's tail copy once per row
// block. Each entry is the same fma sequence either way (b, then x[i, p] * w[o, p] for p in order; the
// product commutes), so which way a call goes does not change its bits. (The data gradient the same
// way, dx^T = w^T dy^T, read w^T in place one row of w per depth step and ran slower than the panels.)
namespace {
bool transposed(int n, int out) { return n < out; }
std::size_t padded_samples(int n) { return (std::size_t(n) + 15) / 16 * 16; }
}  // namespace

// Enough for any call of n samples or fewer (a micro-batch's last, ragged one may go the other way).
std::size_t linear_forward_workspace(int n, int in, int out) {
  const std::size_t transposed_len = padded_samples(std::min(n, out - 1)) * (std::size_t(in) + std::size_t(out));
  return transposed(n, out) ? transposed_len : std::max(transposed_len, std::size_t(in) * std::size_t(out));
}

namespace {
// A right-hand operand of `depth` rows and `cols` columns as panels of `width` columns (the last one
// narrower), each [depth, width] row-major and contiguous: panel q at q * width * depth. The width is whole
// 48-column tiles whose rows fit in 256 KiB of L2.
struct Panels {
  std::ptrdiff_t depth, cols, width;
  template <class T> static Panels of(std::ptrdiff_t depth, std::ptrdiff_t cols) {
    constexpr std::ptrdiff_t kTile = 48, kBytes = 256 << 10;
    return {depth, cols, std::max<std::ptrdiff_t>(kTile, kBytes / (depth * std::ptrdiff_t{sizeof(T)}) / kTile * kTile)};
  }
  std::ptrdiff_t width_at(std::ptrdiff_t c) const { return std::min(width, cols - c / width * width); }
};

// dst[rows, c0:c1] (=|+=) lhs[rows, depth] * the panels' columns c0:c1 (a range may start or end inside a
// panel), in depth pieces whose lhs block stays in L2 (ordered_gemm.h's l2_blocking): the same
// per-entry fma sequence as one ordered_gemm over the whole matrix.
template <class T>
void paneled(T* dst, std::ptrdiff_t ldd, const T* lhs, std::ptrdiff_t rows, const T* panels, const Panels& p,
             std::ptrdiff_t c0, std::ptrdiff_t c1, bool from_dst) {
  const std::ptrdiff_t piece = detail::l2_blocking<T>(rows, p.depth).depth;
  std::ptrdiff_t p0 = 0;
  do {
    const std::ptrdiff_t p1 = std::min(p.depth, p0 + piece);
    for (std::ptrdiff_t c = c0; c < c1;) {
      const std::ptrdiff_t start = c / p.width * p.width, width = p.width_at(c), end = std::min(c1, start + width);
      ordered_gemm(dst + c, ldd, lhs + p0, p.depth, panels + start * p.depth + p0 * width + (c - start), width, rows,
                   end - c, p1 - p0, static_cast<const T*>(nullptr), from_dst || p0 > 0);
      c = end;
    }
    p0 = p1;
  } while (p0 < p.depth);
}

// dst[cols, ld] = src[n, cols]^T (rows lds apart), columns n .. ld of each row zero.
template <class T> void to_columns(T* dst, std::ptrdiff_t ld, const T* src, std::ptrdiff_t lds, int n, std::ptrdiff_t cols) {
  detail::transpose_into(dst, ld, src, lds, n, cols);
  if (ld > n)
    for (std::ptrdiff_t c = 0; c < cols; ++c) std::fill(dst + c * ld + n, dst + (c + 1) * ld, T(0));
}

// dst[n, cols] (rows ldd apart) = the first n columns of src[cols, ld], transposed.
template <class T> void from_columns(T* dst, std::ptrdiff_t ldd, const T* src, std::ptrdiff_t ld, int n, std::ptrdiff_t cols) {
  detail::transpose_into(dst, ldd, src, ld, cols, n);
}

// f(rows [r0, r1), cols [c0, c1)) over blocks of a rows x cols output, split along the rows if by_rows,
// else along the longer side.
template <class F> void split_output(std::ptrdiff_t rows, std::ptrdiff_t cols, double work, F&& f, bool by_rows = false) {
  if (by_rows || rows >= cols) {
    parallel_ranges(rows, work, [&](Eigen::Index r0, Eigen::Index r1) { f(r0, r1, 0, cols); });
  } else {
    parallel_ranges(cols, work, [&](Eigen::Index c0, Eigen::Index c1) { f(0, rows, c0, c1); });
  }
}
}  // namespace

// The data gradient copies w's panels a chunk of at most kChunkBytes at a time (one panel at least):
// copying the whole weight would make the largest layer's weight a second time the step's workspace (VGG's
// 25088 x 4096 classifier: 392 MiB), while one chunk for a small layer keeps it to one parallel pass.
namespace {
constexpr std::ptrdiff_t kChunkBytes = 16 << 20;
template <class T> std::ptrdiff_t chunk_columns(const Panels& p) {
  const std::ptrdiff_t panels = std::max<std::ptrdiff_t>(1, kChunkBytes / (p.depth * p.width * std::ptrdiff_t{sizeof(T)}));
  return std::min(p.cols, panels * p.width);
}
}  // namespace

std::size_t linear_backward_data_workspace(int in, int out) {
  return std::size_t(out) * std::size_t(std::max(chunk_columns<float>(Panels::of<float>(out, in)),
                                                 chunk_columns<double>(Panels::of<double>(out, in))));
}

template <class T>
void linear_forward(T* y, const T* x, const T* w, const T* b, int n, int in, int out, T* workspace, bool relu) {
  if (transposed(n, out)) {
    const std::ptrdiff_t ld = padded_samples(n);
    T* xt = workspace;
    T* yt = workspace + ld * in;
    // One parallel region: the threads transpose x a share of its features each, then each multiplies its
    // rows of w and transposes them back into its columns of y. Copied on one thread between two regions,
    // the transposes took a sixth of mlp's first layer (64 x 784 -> 256) while the other thread waited.
#pragma omp parallel if (1.0 * n * in * out > detail::kParallelMacs)
    {
      const std::ptrdiff_t t = omp_get_thread_num(), threads = omp_get_num_threads();
      const std::ptrdiff_t f0 = in * t / threads, f1 = in * (t + 1) / threads;
      to_columns(xt + f0 * ld, ld, x + f0, in, n, f1 - f0);
#pragma omp barrier
      const std::ptrdiff_t o0 = out * t / threads, o1 = out * (t + 1) / threads;
      // Blocked by the size of x^T, the operand every row block of w passes over (w is read once).
      if (o0 < o1) {
        detail::for_each_block<T>(ld, ld, in, false, [&](auto p0, auto p1, auto c0, auto c1, bool from_dst) {
          ordered_gemm(yt + o0 * ld + c0, ld, w + o0 * in + p0, in, xt + p0 * ld + c0, ld, o1 - o0, c1 - c0, p1 - p0,
                       b && !from_dst ? b + o0 : nullptr, from_dst);
        });
        from_columns(y + o0, out, yt + o0 * ld, ld, n, o1 - o0);
        if (relu)
          for (std::ptrdiff_t r = 0; r < n; ++r)
            for (T* v = y + r * out + o0; v < y + r * out + o1; ++v) *v = *v <= T(0) ? T(0) : *v;
      }
    }
    return;
  }
  const Panels p = Panels::of<T>(in, out);
  for (std::ptrdiff_t c = 0; c < out; c += p.width)  // panel [in, width] = w[c:c+width, :]^T
    detail::transpose_into(workspace + c * in, p.width_at(c), w + c * in, in, p.width_at(c), in);
  split_output(n, out, 1.0 * n * in * out, [&](std::ptrdiff_t r0, std::ptrdiff_t r1, std::ptrdiff_t c0, std::ptrdiff_t c1) {
    // Seeding y with the bias starts every entry's fma sequence at it.
    if (b)
      for (std::ptrdiff_t r = r0; r < r1; ++r) std::copy(b + c0, b + c1, y + r * out + c0);
    paneled(y + r0 * out, out, x + r0 * in, r1 - r0, workspace, p, c0, c1, b != nullptr);
    // relu_forward's rule: NaN propagates, -0 becomes 0.
    if (relu)
      for (std::ptrdiff_t r = r0; r < r1; ++r)
        for (T* v = y + r * out + c0; v < y + r * out + c1; ++v) *v = *v <= T(0) ? T(0) : *v;
  });
}

template <class T>
void linear_backward_data(T* dx, const T* dy, const T* w, int n, int in, int out, T* workspace, bool accumulate) {
  const Panels p = Panels::of<T>(out, in);
  const std::ptrdiff_t chunk = chunk_columns<T>(p);
  for (std::ptrdiff_t c = 0; c < in; c += chunk) {  // columns c:c+cols of w as panels [out, width]
    const std::ptrdiff_t cols = std::min(chunk, in - c);
    const Panels part{out, cols, p.width};
    // Row by row (each row of the chunk read whole), the rows shared among the threads.
    parallel_ranges(out, 1.0 * out * cols, [&](Eigen::Index o0, Eigen::Index o1) {
      for (std::ptrdiff_t o = o0; o < o1; ++o)
        for (std::ptrdiff_t q = 0; q < cols; q += p.width)
          std::copy(w + o * in + c + q, w + o * in + c + q + part.width_at(q), workspace + q * out + o * part.width_at(q));
    });
    split_output(n, cols, 1.0 * n * cols * out,
                 [&](std::ptrdiff_t r0, std::ptrdiff_t r1, std::ptrdiff_t c0, std::ptrdiff_t c1) {
                   paneled(dx + r0 * in + c, in, dy + r0 * out, r1 - r0, workspace, part, c0, c1, accumulate);
                 });
  }
}

// The weight gradient's threads take rows of dw (output features) wherever each gets 16 of them (two
// AVX-512 tiles of 8 rows), whichever side is longer: the optimizer then updates the same rows on the same thread, in its
// contiguous per-thread ranges of the parameter block, and the next forward pass reads them there. Split
// by columns, every row was half written on the other core: mlp's first layer (784 -> 256, 64 samples,
// 2 threads) took 244 us a step in `train` against 157 us by rows, though as fast alone in kernels_bench.
template <class T>
void linear_backward_weight(T* dw, T* db, const T* dy, const T* x, int n, int in, int out, bool accumulate) {
  constexpr int kRowsPerThread = 16;
  const bool by_rows = out >= kRowsPerThread * omp_get_max_threads();
  split_output(out, in, 1.0 * n * in * out, [&](std::ptrdiff_t r0, std::ptrdiff_t r1, std::ptrdiff_t c0, std::ptrdiff_t c1) {
    detail::for_each_block<T>(r1 - r0, c1 - c0, n, accumulate, [&](auto p0, auto p1, auto b0, auto b1, bool from_dst) {
      ordered_gemm_tn(dw + r0 * in + c0 + b0, in, dy + p0 * out + r0, out, x + p0 * in + c0 + b0, in, r1 - r0, b1 - b0,
                      p1 - p0, from_dst);
    });
    if (db && c0 == 0) {
      const auto sums = CMatR<T>(dy, n, out).middleCols(r0, r1 - r0).colwise().sum().transpose();
      detail::assign(VecMap<T>(db + r0, r1 - r0), sums, accumulate);
    }
  }, by_rows);
}

#define CRUMB_INSTANTIATE(T)                                                                            \
  template void linear_forward<T>(T*, const T*, const T*, const T*, int, int, int, T*, bool);         \
  template void linear_backward_data<T>(T*, const T*, const T*, int, int, int, T*, bool);             \
  template void linear_backward_weight<T>(T*, T*, const T*, const T*, int, int, int, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
