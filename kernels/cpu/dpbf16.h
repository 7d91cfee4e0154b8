// What the AVX512_BF16 kernels (conv2d_bf16.cc, linear_bf16.cc) share: the target attribute their
// functions carry, so that every AVX-512 build holds them and has_bf16_dot() chooses them at run time
// (x86-64-v4 does not include AVX512_BF16), the sum of a register's lanes and the rounding of float32
// lanes to bf16 (transpose.h has the 16 x 16 transpose the AMX kernels' pair layouts use). CRUMB_DPBF16 is 1 where they are built: builds for
// AVX-512 only, so that the portable package's x86-64-v2 and -v3 kernel
// libraries hold no instruction beyond their level (tests/python/test_install.py); the loader gives an
// AVX-512 CPU the v4 library.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && defined(__AVX512F__)
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/transpose.h"
// GCC 12's AVX-512 intrinsics read _mm512_undefined_* values, which -Wuninitialized reports once they
// are inlined into a function with a target attribute.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define CRUMB_DPBF16 1
#define CRUMB_TARGET_DPBF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace crumb::cpu::detail {

// The 16 lanes' sum, halves added to halves: one fixed order.
CRUMB_TARGET_DPBF16 inline float sum_lanes(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  __m128 q = _mm512_castps512_ps128(v);
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// float32 lanes rounded to bf16 as kernels/half.h's to_bf16 does (nearest even; NaN quieted).
CRUMB_TARGET_DPBF16 inline __m256i to_bf16_lanes(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}


}  // namespace crumb::cpu::detail
#endif
