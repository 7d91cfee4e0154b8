// Internal helpers shared by the CPU kernel sources. Not part of the kernel interface.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include <omp.h>

#include "kernels/half.h"

// Eigen's parallel GEMM mallocs its shared packing buffers on every call, so Eigen never threads in
// the kernels: they parallelise around their GEMMs themselves (see parallel_ranges). This must come
// before any Eigen include in the kernel sources.
#define EIGEN_DONT_PARALLELIZE
// GCC 12 reports false -Wmaybe-uninitialized positives inside Eigen's AVX-512 packet code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace crumb::cpu::detail {

// Below this many elements an OpenMP fork/join (~1-2 us on two cores) costs more than the
// memory-bound loop it would split.
inline constexpr std::ptrdiff_t kParallelGrain = 32768;

// The write mode of a gradient output as a compile-time flag, so hot loops are compiled once per
// mode instead of testing `accumulate` per element.
template <class F> void with_write_mode(bool accumulate, F&& body) {
  if (accumulate) {
    body(std::true_type{});
  } else {
    body(std::false_type{});
  }
}

// A kernel templated on its storage type T (float, double, or bf16 and f16 of kernels/half.h) loads
// with load(), computes in Arith<T> and stores with store<T>(), rounding to nearest even. Both are the
// identity for float and double, so those instantiations compute exactly what they always did.
template <class T> inline Arith<T> load(T v) {
  if constexpr (std::is_same_v<T, Arith<T>>) {
    return v;
  } else {
    return to_float(v);
  }
}
template <class T> inline T store(Arith<T> v) {
  if constexpr (std::is_same_v<T, Arith<T>>) {
    return v;
  } else {
    return from_float<T>(v);
  }
}

// The sum of n values in Arith<T>: 16 running sums, value q into sum q mod 16, folded pairwise at the end.
// One running sum is one dependent add per value (a bias gradient's sums were 60-70% of cnn's first
// convolution's weight pass); 16 of them vectorise without reordering any one, so the bits are fixed.
template <class T> Arith<T> lane_sum(const T* p, std::ptrdiff_t n) {
  Arith<T> acc[16] = {};
  std::ptrdiff_t q = 0;
  for (; q + 16 <= n; q += 16)
    for (int l = 0; l < 16; ++l) acc[l] += load(p[q + l]);
  for (int l = 0; q < n; ++q, ++l) acc[l] += load(p[q]);
  for (int w = 8; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// dst (=|+=) value; a 16-bit dst is loaded, added to in float32 and rounded once.
template <class Acc, class T> inline void put(Acc, T& dst, Arith<T> value) {
  if constexpr (Acc::value) {
    dst = store<T>(load(dst) + value);
  } else {
    dst = store<T>(value);
  }
}

// dst (=|+=) src for Eigen expressions; noalias keeps products from evaluating into a temporary.
template <class Dst, class Src> void assign(Dst&& dst, const Src& src, bool accumulate) {
  if (accumulate) {
    dst.noalias() += src;
  } else {
    dst.noalias() = src;
  }
}

// A single-threaded GEMM packs its operands into panels of depth x rows and depth x cols, which Eigen
// puts on the stack up to EIGEN_STACK_ALLOCATION_LIMIT (128 KiB) and mallocs per call beyond it.
inline constexpr std::size_t kPanelBytes = 112 * 1024;
inline constexpr Eigen::Index kMaxTile = 256;

// Up to this many rows (a handful of channels or samples), dst is computed one row at a time:
// Eigen's GEMM micro-kernel would leave most of its register tile idle, while a GEMV streams the
// other operand at full vector width.
inline constexpr Eigen::Index kGemvMaxRows = 8;

// dst (=|+=) lhs * rhs without heap allocation: the product is tiled until every packed panel fits
// on the stack (a few extra passes over dst, negligible next to the multiply-adds).
template <class Dst, class Lhs, class Rhs> void gemm(Dst&& dst, const Lhs& lhs, const Rhs& rhs, bool accumulate) {
  using Index = Eigen::Index;
  using Scalar = typename std::decay_t<Dst>::Scalar;
  const Index m = dst.rows(), n = dst.cols(), k = lhs.cols();
  if (m <= kGemvMaxRows) {
    for (Index i = 0; i < m; ++i) assign(dst.row(i), lhs.row(i) * rhs, accumulate);
    return;
  }
  if (k == 0) {
    if (!accumulate) dst.setZero();
    return;
  }
  // Even split of size into pieces of at most max_piece.
  auto piece = [](Index size, Index max_piece) {
    const Index pieces = (size + max_piece - 1) / max_piece;
    return (size + pieces - 1) / pieces;
  };
  const Index tile_m = piece(m, kMaxTile), tile_n = piece(n, kMaxTile);
  const Index depth = std::max<Index>(1, kPanelBytes / (sizeof(Scalar) * std::max(tile_m, tile_n)));
  const Index tile_k = piece(k, depth);
  for (Index i = 0; i < m; i += tile_m) {
    const Index rows = std::min(tile_m, m - i);
    for (Index j = 0; j < n; j += tile_n) {
      const Index cols = std::min(tile_n, n - j);
      for (Index d = 0; d < k; d += tile_k) {
        const Index span = std::min(tile_k, k - d);
        assign(dst.block(i, j, rows, cols), lhs.block(i, d, rows, span) * rhs.block(d, j, span, cols),
               accumulate || d > 0);
      }
    }
  }
}

// Splits [0, total) into one contiguous range per thread and runs f(begin, end) on each, threaded
// only when `work` (multiply-adds) pays for the fork/join.
inline constexpr double kParallelMacs = 1 << 20;
template <class F> void parallel_ranges(Eigen::Index total, double work, F&& f) {
#pragma omp parallel if (work > kParallelMacs)
  {
    const Eigen::Index t = omp_get_thread_num(), threads = omp_get_num_threads();
    const Eigen::Index begin = total * t / threads, end = total * (t + 1) / threads;
    if (begin < end) f(begin, end);
  }
}

// Half-open range of output positions.
struct Range {
  int lo, hi;
};

// Output positions o in [lo, hi) whose input coordinate o * stride - pad + k lies in [0, in): the
// positions where window tap k hits the image rather than padding.
inline Range valid_range(int k, int stride, int pad, int in, int out) {
  const int lo = std::min(out, pad > k ? (pad - k + stride - 1) / stride : 0);
  const int hi = std::clamp((in + pad - k + stride - 1) / stride, lo, out);
  return {lo, hi};
}

// Copies n elements for short n (a feature-map row) without a library call, which would cost more
// than the copy: fixed-size memcpys compile to vector moves, and the last chunk overlaps the one
// before instead of leaving a scalar tail. All rows of a conv have the same length, so the branches
// predict perfectly. Always inlined: GCC otherwise keeps it out of line, and the call is the cost.
template <class T> inline __attribute__((always_inline)) void copy_short(T* d, const T* src, int n) {
  constexpr int kChunk = 64 / sizeof(T);
  auto chunks = [&](auto width) {
    for (int j = 0; j + width < n; j += width) std::memcpy(d + j, src + j, width * sizeof(T));
    std::memcpy(d + n - width, src + n - width, width * sizeof(T));
  };
  if (n >= kChunk) {
    chunks(std::integral_constant<int, kChunk>{});
  } else if (n >= kChunk / 2) {
    chunks(std::integral_constant<int, kChunk / 2>{});
  } else if (n >= kChunk / 4) {
    chunks(std::integral_constant<int, kChunk / 4>{});
  } else {
    for (int j = 0; j < n; ++j) d[j] = src[j];
  }
}

template <class T> using MatR = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <class T>
using CMatR = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <class T> using VecMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;
template <class T> using CVecMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;

}  // namespace crumb::cpu::detail
