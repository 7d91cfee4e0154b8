#include "kernels/cpu/convert16.h"

// Builds for AVX2 and above only, as kernels/cpu/dpbf16.h says why (x86-64-v3 includes F16C).
#if defined(__x86_64__) && defined(__GNUC__) && defined(__AVX2__)
#include <cpuid.h>
#include <immintrin.h>
#define CRUMB_SIMD16 1
#define CRUMB_TARGET_SIMD16 __attribute__((target("avx2,f16c")))
#endif

namespace crumb::cpu {
namespace {

// Element by element, through half.h (one side of each conversion is float, for which they are identity).
template <class D, class S> void convert_scalar(D* d, const S* s, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) d[i] = from_float<D>(to_float(s[i]));
}

#if CRUMB_SIMD16
CRUMB_TARGET_SIMD16 void convert_avx2(float* d, const bf16* s, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm256_slli_epi32(u, 16));
  }
  convert_scalar(d + i, s + i, n - i);
}

// vcvtph2ps quiets a signalling NaN; half.h keeps its bits, so lanes with the top exponent (NaN and
// infinity) take half.h's formula.
CRUMB_TARGET_SIMD16 void convert_avx2(float* d, const f16* s, std::size_t n) {
  const __m256i top = _mm256_set1_epi32(0x7c00), sign = _mm256_set1_epi32(0x8000), mant = _mm256_set1_epi32(0x3ff),
                inf = _mm256_set1_epi32(0x7f800000);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m256i u = _mm256_cvtepu16_epi32(h);
    const __m256i special = _mm256_or_si256(
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(u, sign), 16), inf),
        _mm256_slli_epi32(_mm256_and_si256(u, mant), 13));
    const __m256i is_special = _mm256_cmpeq_epi32(_mm256_and_si256(u, top), top);
    const __m256i f = _mm256_blendv_epi8(_mm256_castps_si256(_mm256_cvtph_ps(h)), special, is_special);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), f);
  }
  convert_scalar(d + i, s + i, n - i);
}

// Rounding to nearest even on the bits, as half.h's to_bf16: adding 0x7fff plus the kept part's lowest
// bit carries into the kept part exactly when the dropped part is over half, or half with an odd kept
// part. (vcvtneps2bf16 would flush subnormals to zero.)
CRUMB_TARGET_SIMD16 __m256i bf16_bits(__m256i u) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

CRUMB_TARGET_SIMD16 void convert_avx2(bf16* d, const float* s, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i a = bf16_bits(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)));
    const __m256i b = bf16_bits(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i + 8)));
    // packus works within 128-bit lanes: a0-3 b0-3 | a4-7 b4-7, put back in order by 64-bit quarters.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), packed);
  }
  convert_scalar(d + i, s + i, n - i);
}

// vcvtps2ph keeps a NaN's sign and top payload bits; half.h writes every NaN as sign | 0x7e00, which is
// what vcvtps2ph makes of the quiet NaN with no payload, so NaN lanes are replaced by it first.
CRUMB_TARGET_SIMD16 void convert_avx2(f16* d, const float* s, std::size_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f), qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(s + i);
    const __m256 canonical = _mm256_or_ps(_mm256_and_ps(x, sign), qnan);
    x = _mm256_blendv_ps(x, canonical, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  convert_scalar(d + i, s + i, n - i);
}
#endif

}  // namespace

bool has_simd16() {
#if CRUMB_SIMD16
  // F16C from cpuid itself: clang's __builtin_cpu_supports does not know it.
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  }();
  return has;
#else
  return false;
#endif
}

namespace {
// A run through its SIMD path where this build has one and the caller and the CPU allow it.
template <class D, class S> void convert_run(D* d, const S* s, std::size_t n, bool simd) {
#if CRUMB_SIMD16
  if (simd && has_simd16()) return convert_avx2(d, s, n);
#else
  (void)simd;
#endif
  convert_scalar(d, s, n);
}
}  // namespace

void to_float_run(float* d, const bf16* s, std::size_t n, bool simd) { convert_run(d, s, n, simd); }
void to_float_run(float* d, const f16* s, std::size_t n, bool simd) { convert_run(d, s, n, simd); }
void from_float_run(bf16* d, const float* s, std::size_t n, bool simd) { convert_run(d, s, n, simd); }
void from_float_run(f16* d, const float* s, std::size_t n, bool simd) { convert_run(d, s, n, simd); }

}  // namespace crumb::cpu
