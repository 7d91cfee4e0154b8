// Transposes of row-major blocks: GEMM operands want their columns contiguous (ordered_gemm's right-hand
// matrix, a linear layer's samples as columns), the AMX kernels their pairs. On AVX-512 16 x 16 blocks of
// 32-bit entries go through registers (16 loads, 64 shuffles, 16 stores) instead of 256 scalar copies.
#pragma once
#include <cstddef>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics read _mm512_undefined_* values, which -Wmaybe-uninitialized reports once
// they are inlined.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace crumb::cpu::detail {

#if defined(__AVX512F__)
// 16 rows of 16 32-bit entries (lds apart) into 16 columns (ldd apart).
inline void transpose16x16(const uint32_t* src, std::ptrdiff_t lds, uint32_t* dst, std::ptrdiff_t ldd) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * lds);
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 2; ++i)
    for (int c = 0; c < 4; ++c) {
      t[8 * i + c] = _mm512_shuffle_i32x4(r[8 * i + c], r[8 * i + 4 + c], 0x88);
      t[8 * i + 4 + c] = _mm512_shuffle_i32x4(r[8 * i + c], r[8 * i + 4 + c], 0xdd);
    }
  for (int c = 0; c < 8; ++c) {
    r[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xdd);
  }
  for (int i = 0; i < 16; ++i) _mm512_storeu_si512(dst + i * ldd, r[i]);
}
#endif

// dst[c * ldd + r] = src[r * lds + c] for rows r < rows, columns c < cols. In square blocks, so that both
// sides stay within a few cache lines per block.
template <class T>
void transpose_into(T* dst, std::ptrdiff_t ldd, const T* src, std::ptrdiff_t lds, std::ptrdiff_t rows,
                    std::ptrdiff_t cols) {
  constexpr std::ptrdiff_t kBlock = 16;
  for (std::ptrdiff_t r0 = 0; r0 < rows; r0 += kBlock) {
    const std::ptrdiff_t r1 = r0 + kBlock < rows ? r0 + kBlock : rows;
    for (std::ptrdiff_t c0 = 0; c0 < cols; c0 += kBlock) {
      const std::ptrdiff_t c1 = c0 + kBlock < cols ? c0 + kBlock : cols;
#if defined(__AVX512F__)
      if constexpr (sizeof(T) == 4) {
        if (r1 - r0 == kBlock && c1 - c0 == kBlock) {
          transpose16x16(reinterpret_cast<const uint32_t*>(src + r0 * lds + c0), lds,
                         reinterpret_cast<uint32_t*>(dst + c0 * ldd + r0), ldd);
          continue;
        }
      }
#endif
      for (std::ptrdiff_t c = c0; c < c1; ++c)
        for (std::ptrdiff_t r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
    }
  }
}

}  // namespace crumb::cpu::detail
