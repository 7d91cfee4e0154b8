// A GEMM whose every entry is computed by the same sequence of operations whatever the matrix sizes and
// the entry's position: acc = init[row]; acc = fma(lhs[row, p], rhs[p, col], acc) for p = 0 .. k-1.
// Eigen's GEMM does not promise that (an entry's rounding changes with the number of columns and with
// where the column falls in its register tiles), which matters where samples share one GEMM: a sample's
// result would depend on which samples it was grouped with, so on the micro-batch size and the thread
// split, and the forward pass would no longer be bitwise the same at every micro-batch size (a ReLU
// kink then turns a last-bit difference into a different gradient).
//
// The sequence may also start from dst's entry (acc = dst[row, col]), which is how the result is added to
// what dst holds (accumulate) and how a per-column init (a linear layer's bias) is given: seeded into dst.
// Either way a split of the depth into pieces that each start where the previous stopped gives the same
// bits as one pass.
//
// The right-hand matrix need not exist: its rows are given by where they start (RhsRows), so a
// convolution reads its column matrix straight out of a padded image (an implicit im2col).
#pragma once
#include <cmath>
#include <cstddef>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/transpose.h"

namespace crumb::cpu::detail {

// The widest vector the build targets and how many vector registers it has: tiles are sized by them,
// so that a build for an older CPU (or the sanitizer build, which targets plain x86-64) keeps its
// accumulators in registers too.
#if defined(__AVX512F__)
inline constexpr int kVectorBytes = 64, kVectorRegisters = 32;
#elif defined(__AVX__)
inline constexpr int kVectorBytes = 32, kVectorRegisters = 16;
#else
inline constexpr int kVectorBytes = 16, kVectorRegisters = 16;
#endif

template <class T> inline T ordered_fma(T a, T b, T acc) {
#ifdef __FMA__
  return std::fma(a, b, acc);  // one instruction here, vectorised in the tiles below
#else
  return acc + a * b;  // no FMA unit: a software fma would be a library call per element
#endif
}

// Row g * taps + t of the right-hand matrix starts at base + g * group_stride + tap[t]; columns are
// contiguous. A row-major matrix is one tap at offset 0 with its leading dimension as the group stride;
// a convolution over a padded image is one group per input channel (the plane as stride) and one tap
// per kernel offset. k = groups * taps.
template <class T> struct RhsRows {
  const T* base;
  std::ptrdiff_t group_stride;
  const std::ptrdiff_t* tap;
  int taps;
  int groups;
  RhsRows at_column(std::ptrdiff_t j) const { return {base + j, group_stride, tap, taps, groups}; }
};

// Where the left-hand columns of the same depth terms are: column (g, t) at g * group_stride + tap[t]
// (tap has rhs.taps entries). Null: columns in order, g * taps + t. A small-map convolution skips the
// kernel taps that fall in the padding on both sides alike.
struct LhsCols {
  std::ptrdiff_t group_stride;
  const std::ptrdiff_t* tap;
};

// Register tile of R rows x C columns: C independent lanes, k streamed once per tile. Whole packets
// through Eigen's packet functions (pmadd is the fused multiply-add wherever the build has one, and
// a * b + acc where ordered_fma is too), so the tile is vector code without relying on the
// auto-vectoriser, which the sanitizer build's instrumented loads defeat; narrower tails lane by lane.
// Eigen's packet types lose their vector attributes as template arguments, which GCC says (as Eigen's
// own code does everywhere, silenced there by being a system header).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
#endif
template <int R, int C, class T>
inline void ordered_tile(T* dst, std::ptrdiff_t ldd, const T* lhs, std::ptrdiff_t ldl, const LhsCols* cols,
                         const RhsRows<T>& rhs, const T* init, bool from_dst) {
  using namespace Eigen::internal;
  using Packet = typename packet_traits<T>::type;
  constexpr int L = sizeof(Packet) / sizeof(T);
  const T* group = rhs.base;
  const T* lhs_group = lhs;
  const std::ptrdiff_t lhs_stride = cols ? cols->group_stride : rhs.taps;
  if constexpr (C % L == 0) {
    constexpr int V = C / L;
    Packet acc[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v)
        acc[r][v] = from_dst ? ploadu<Packet>(dst + r * ldd + v * L) : pset1<Packet>(init ? init[r] : T(0));
    // One depth term: R x V fmas of the right-hand row at b by the left-hand column at a.
    auto term = [&](const T* a, const T* b) __attribute__((always_inline)) {
      Packet bv[V];
      for (int v = 0; v < V; ++v) bv[v] = ploadu<Packet>(b + v * L);
      for (int r = 0; r < R; ++r) {
        const Packet ar = pset1<Packet>(a[r * ldl]);
        for (int v = 0; v < V; ++v) acc[r][v] = pmadd(ar, bv[v], acc[r][v]);
      }
    };
    if (rhs.taps == 1) {
      // Plain matrices (linear layers, 1x1 convolutions, weight gradients): two pointers that step, where
      // the tap bookkeeping below took a third of the loop's instructions.
      const T* b = group + rhs.tap[0];
      const T* a = lhs_group + (cols ? cols->tap[0] : 0);
      for (int g = 0; g < rhs.groups; ++g, b += rhs.group_stride, a += lhs_stride) term(a, b);
    } else {
      // One flat loop over the depth: around a nested (group, tap) loop GCC spills the accumulators.
      const std::ptrdiff_t k = std::ptrdiff_t{rhs.groups} * rhs.taps;
      for (std::ptrdiff_t p = 0, t = 0; p < k; ++p) {
        term(lhs_group + (cols ? cols->tap[t] : t), group + rhs.tap[t]);
        if (++t == rhs.taps) {
          t = 0;
          group += rhs.group_stride;
          lhs_group += lhs_stride;
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) pstoreu(dst + r * ldd + v * L, acc[r][v]);
  } else {
    T acc[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c] = from_dst ? dst[r * ldd + c] : init ? init[r] : T(0);
    for (int g = 0; g < rhs.groups; ++g, group += rhs.group_stride, lhs_group += lhs_stride) {
      for (int t = 0; t < rhs.taps; ++t) {
        const T* b = group + rhs.tap[t];
        const T* a = lhs_group + (cols ? cols->tap[t] : t);
        for (int r = 0; r < R; ++r)
          for (int c = 0; c < C; ++c) acc[r][c] = ordered_fma(a[r * ldl], b[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) dst[r * ldd + c] = acc[r][c];
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

template <int R, int C, class T>
inline void ordered_rows(T* dst, std::ptrdiff_t ldd, const T* lhs, std::ptrdiff_t ldl, const LhsCols* cols,
                         const RhsRows<T>& rhs, std::ptrdiff_t n, const T* init, bool from_dst);

// The last n columns, fewer than one vector (a 14x14 map's 196 = 4 x 48 + 4): tiles narrower than a
// vector run lane by lane at a sixteenth of the rate, as long as all the rest. Instead their right-hand
// rows are copied, zero-padded to one vector, a few groups at a time, and run through the one-vector
// tile from its accumulators kept here (the padding lanes compute values that are dropped): every
// entry keeps its sequence of fmas.
template <int R, class T>
inline void ordered_tail(T* dst, std::ptrdiff_t ldd, const T* lhs, std::ptrdiff_t ldl, const LhsCols* cols,
                         const RhsRows<T>& rhs, std::ptrdiff_t n, const T* init, bool from_dst) {
  constexpr int L = kVectorBytes / sizeof(T), kMaxTaps = 64, kRows = 256;  // buf: 16 KiB of stack
  if (rhs.taps > kMaxTaps) return ordered_rows<R, L / 2>(dst, ldd, lhs, ldl, cols, rhs, n, init, from_dst);
  T acc[R * L], buf[kRows * L];
  std::ptrdiff_t tap[kMaxTaps];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < L; ++c) acc[r * L + c] = c >= n ? T(0) : from_dst ? dst[r * ldd + c] : init ? init[r] : T(0);
  for (int t = 0; t < rhs.taps; ++t) tap[t] = std::ptrdiff_t{t} * L;
  const int per = kRows / rhs.taps;
  const std::ptrdiff_t lhs_stride = cols ? cols->group_stride : rhs.taps;
  for (int g0 = 0; g0 < rhs.groups; g0 += per) {
    const int count = rhs.groups - g0 < per ? rhs.groups - g0 : per;
    for (int g = 0; g < count; ++g)
      for (int t = 0; t < rhs.taps; ++t) {
        const T* b = rhs.base + (g0 + g) * rhs.group_stride + rhs.tap[t];
        T* d = buf + (std::ptrdiff_t{g} * rhs.taps + t) * L;
        for (int c = 0; c < L; ++c) d[c] = c < n ? b[c] : T(0);
      }
    ordered_tile<R, L>(acc, L, lhs + g0 * lhs_stride, ldl, cols, RhsRows<T>{buf, rhs.taps * L, tap, rhs.taps, count},
                       static_cast<const T*>(nullptr), true);
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < n; ++c) dst[r * ldd + c] = acc[r * L + c];
}

// Columns [0, n) of R rows in tiles of C, then narrower tiles for the tail (same per-entry sequence):
// one vector narrower at a time down to one vector, then ordered_tail.
template <int R, int C, class T>
inline void ordered_rows(T* dst, std::ptrdiff_t ldd, const T* lhs, std::ptrdiff_t ldl, const LhsCols* cols,
                         const RhsRows<T>& rhs, std::ptrdiff_t n, const T* init, bool from_dst) {
  constexpr int kVector = kVectorBytes / sizeof(T);
  std::ptrdiff_t j = 0;
  // A last tile of one vector (R accumulators, R broadcasts per vector load) runs at half speed: C + 1
  // vectors left over go as two tiles of (C + 1) / 2 vectors instead (a 7x7 map's 64 columns as 32 + 32).
  const std::ptrdiff_t full = C == 3 * kVector && n % C == kVector ? n - C - kVector : n;
  for (; j + C <= full; j += C) ordered_tile<R, C>(dst + j, ldd, lhs, ldl, cols, rhs.at_column(j), init, from_dst);
  if constexpr (C == kVector) {
    if (j < n) ordered_tail<R>(dst + j, ldd, lhs, ldl, cols, rhs.at_column(j), n - j, init, from_dst);
  } else if constexpr (C > 1) {
    constexpr int kNext = C > kVector ? C - kVector : C / 2;
    if (j < n) ordered_rows<R, kNext>(dst + j, ldd, lhs, ldl, cols, rhs.at_column(j), n - j, init, from_dst);
  }
}

// The rows under a whole tile (1 to R) as one tile of their height: a row at a time, each pass streaming
// the whole right-hand side again, a 6-channel convolution (lenet5's first layer, forward and data
// gradient) ran a third of its step in 1-row tiles at 3 loads per 3 fmas.
template <int R, int C, class T>
inline void ordered_last_rows(std::ptrdiff_t rows, T* dst, std::ptrdiff_t ldd, const T* lhs, std::ptrdiff_t ldl,
                              const LhsCols* cols, const RhsRows<T>& rhs, std::ptrdiff_t n, const T* init,
                              bool from_dst) {
  if (rows == R) return ordered_rows<R, C>(dst, ldd, lhs, ldl, cols, rhs, n, init, from_dst);
  if constexpr (R > 1) ordered_last_rows<R - 1, C>(rows, dst, ldd, lhs, ldl, cols, rhs, n, init, from_dst);
}

// dst[m, n] = init (per row; null: 0) + lhs[m, k] * rhs[k, n], row-major with leading dimensions; lhs's
// columns where cols says (null: in order). from_dst: dst's own entries in place of init (dst +=).
template <class T>
void ordered_gemm(T* dst, std::ptrdiff_t ldd, const T* lhs, std::ptrdiff_t ldl, const LhsCols* cols,
                  const RhsRows<T>& rhs, std::ptrdiff_t m, std::ptrdiff_t n, const T* init, bool from_dst = false) {
  // Three vectors of columns by 8 rows: 24 accumulators, with the three right-hand vectors and a
  // broadcast 28 of AVX-512's 32 registers: 11 loads per 24 fmas. AVX2 and SSE have 16: 4 rows.
  constexpr int kCols = 3 * kVectorBytes / sizeof(T), kRows = kVectorRegisters / 4;
  std::ptrdiff_t i = 0;
  for (; i + kRows <= m; i += kRows)
    ordered_rows<kRows, kCols>(dst + i * ldd, ldd, lhs + i * ldl, ldl, cols, rhs, n, init ? init + i : nullptr,
                               from_dst);
  if (i < m)
    ordered_last_rows<kRows - 1, kCols>(m - i, dst + i * ldd, ldd, lhs + i * ldl, ldl, cols, rhs, n,
                                        init ? init + i : nullptr, from_dst);
}

template <class T>
void ordered_gemm(T* dst, std::ptrdiff_t ldd, const T* lhs, std::ptrdiff_t ldl, const T* rhs, std::ptrdiff_t ldr,
                  std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const T* init, bool from_dst = false) {
  static constexpr std::ptrdiff_t kNoOffset[1] = {0};
  ordered_gemm(dst, ldd, lhs, ldl, nullptr, RhsRows<T>{rhs, ldr, kNoOffset, 1, static_cast<int>(k)}, m, n, init,
               from_dst);
}

// Blocks of a GEMM that stay in L2 (half of a 1 MiB one): depth pieces whose left-hand [m, depth]
// block fits in kBlockBytes, and within each, column panels of whole tiles whose right-hand [depth,
// width] block does too. Each row block then passes over a panel from L2, and each piece of lhs serves
// every panel; a 1x1 layer's weight (4 MiB at 2048 x 512) or a 56x56 map's column matrix read whole per
// row block came from L3 at half the tiles' rate. A piece after the first continues from dst
// (from_dst), so the entries' fma sequences are those of one pass.
struct Blocking {
  std::ptrdiff_t depth, width;
};
template <class T> Blocking l2_blocking(std::ptrdiff_t m, std::ptrdiff_t k) {
  constexpr std::ptrdiff_t kBlockBytes = 256 << 10, kMinDepth = 64, kTile = 3 * kVectorBytes / sizeof(T);
  const std::ptrdiff_t fit = kBlockBytes / (std::ptrdiff_t{sizeof(T)} * (m > 0 ? m : 1));
  const std::ptrdiff_t depth = k < kMinDepth ? (k > 0 ? k : 1) : fit < kMinDepth ? kMinDepth : fit < k ? fit : k;
  const std::ptrdiff_t width = kBlockBytes / (std::ptrdiff_t{sizeof(T)} * depth) / kTile * kTile;
  return {depth, width > kTile ? width : kTile};
}

// f(p0, p1, c0, c1, from_dst) over the blocks of an [m, n] x depth k product, depth pieces outer.
template <class T, class F>
void for_each_block(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, bool from_dst, F&& f) {
  const Blocking b = l2_blocking<T>(m, k);
  std::ptrdiff_t p0 = 0;
  do {
    const std::ptrdiff_t p1 = p0 + b.depth < k ? p0 + b.depth : k;
    // Under a tile left over joins the last panel: 64 columns as one panel (32 + 32), not 48 + 16.
    for (std::ptrdiff_t c0 = 0, c1; c0 < n; c0 = c1) {
      c1 = n - c0 - b.width < 3 * kVectorBytes / std::ptrdiff_t{sizeof(T)} ? n : c0 + b.width;
      f(p0, p1, c0, c1, from_dst || p0 > 0);
    }
    p0 = p1;
  } while (p0 < k);
}

// The same with lhs given transposed, read in place: lhs[i, p] = lhs_t[p * ldlt + i] (a data gradient's
// w^T, a weight gradient's dy^T). A tile's rows are then adjacent, so its broadcasts share cache lines.
template <class T>
void ordered_gemm_tn(T* dst, std::ptrdiff_t ldd, const T* lhs_t, std::ptrdiff_t ldlt, const T* rhs, std::ptrdiff_t ldr,
                     std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, bool from_dst) {
  static constexpr std::ptrdiff_t kNoOffset[1] = {0};
  const LhsCols cols{ldlt, kNoOffset};
  ordered_gemm(dst, ldd, lhs_t, 1, &cols, RhsRows<T>{rhs, ldr, kNoOffset, 1, static_cast<int>(k)}, m, n,
               static_cast<const T*>(nullptr), from_dst);
}

}  // namespace crumb::cpu::detail
