// What the AVX512_BF16 kernels (conv2d_bf16.cc, linear_bf16.cc) share: the target attribute their
// functions carry, so that every AVX-512 build holds them and has_bf16_dot() chooses them at run time
// (x86-64-v4 does not include AVX512_BF16), and the sum of a register's lanes. CRUMB_DPBF16 is 1 where
// they are built: builds for AVX-512 only, so that the portable package's x86-64-v2 and -v3 kernel
// libraries hold no instruction beyond their level (tests/python/test_install.py); the loader gives an
// AVX-512 CPU the v4 library.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && defined(__AVX512F__)
#include <immintrin.h>
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

}  // namespace crumb::cpu::detail
#endif
