// A GEMM whose every entry is computed by the same sequence of operations whatever the matrix sizes and
// the entry's position: acc = init[row]; acc = fma(lhs[row, p], rhs[p, col], acc) for p = 0 .. k-1.
// Eigen's GEMM does not promise that (an entry's rounding changes with the number of columns and with
// where the column falls in its register tiles), which matters where samples share one GEMM: a sample's
// result would depend on which samples it was grouped with, so on the micro-batch size and the thread
// split, and the forward pass would no longer be bitwise the same at every micro-batch size (a ReLU
// kink then turns a last-bit difference into a different gradient).
#pragma once
#include <cmath>
#include <cstddef>

namespace crumb::cpu::detail {

template <class T> inline T ordered_fma(T a, T b, T acc) {
#ifdef __FMA__
  return std::fma(a, b, acc);  // one instruction here, vectorised in the tiles below
#else
  return acc + a * b;  // no FMA unit: a software fma would be a library call per element
#endif
}

// Register tile of R rows x C columns: C independent vector lanes, k streamed once per tile.
template <int R, int C, class T>
inline void ordered_tile(T* dst, std::ptrdiff_t ldd, const T* lhs, std::ptrdiff_t ldl, const T* rhs, std::ptrdiff_t ldr,
                         std::ptrdiff_t k, const T* init) {
  T acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = init ? init[r] : T(0);
  for (std::ptrdiff_t p = 0; p < k; ++p) {
    const T* b = rhs + p * ldr;
    for (int r = 0; r < R; ++r) {
      const T a = lhs[r * ldl + p];
#pragma omp simd
      for (int c = 0; c < C; ++c) acc[r][c] = ordered_fma(a, b[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) dst[r * ldd + c] = acc[r][c];
}

// Columns [0, n) of R rows in tiles of C, then narrower tiles for the tail (same per-entry sequence).
template <int R, int C, class T>
inline void ordered_rows(T* dst, std::ptrdiff_t ldd, const T* lhs, std::ptrdiff_t ldl, const T* rhs, std::ptrdiff_t ldr,
                         std::ptrdiff_t n, std::ptrdiff_t k, const T* init) {
  std::ptrdiff_t j = 0;
  for (; j + C <= n; j += C) ordered_tile<R, C>(dst + j, ldd, lhs, ldl, rhs + j, ldr, k, init);
  if constexpr (C > 1) {
    if (j < n) ordered_rows<R, C / 2>(dst + j, ldd, lhs, ldl, rhs + j, ldr, n - j, k, init);
  }
}

// dst[m, n] = init (per row; null: 0) + lhs[m, k] * rhs[k, n], all row-major with leading dimensions.
template <class T>
void ordered_gemm(T* dst, std::ptrdiff_t ldd, const T* lhs, std::ptrdiff_t ldl, const T* rhs, std::ptrdiff_t ldr,
                  std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const T* init) {
  // Two 64-byte vectors of columns by 8 rows: 16 accumulators, half of AVX-512's registers (AVX2 spills a
  // little; still far ahead of a per-sample GEMM on a 7x7 map).
  constexpr int kCols = 128 / sizeof(T), kRows = 8;
  std::ptrdiff_t i = 0;
  for (; i + kRows <= m; i += kRows)
    ordered_rows<kRows, kCols>(dst + i * ldd, ldd, lhs + i * ldl, ldl, rhs, ldr, n, k, init ? init + i : nullptr);
  for (; i < m; ++i) ordered_rows<1, kCols>(dst + i * ldd, ldd, lhs + i * ldl, ldl, rhs, ldr, n, k, init ? init + i : nullptr);
}

}  // namespace crumb::cpu::detail
