// The 16-bit storage types of mixed precision and their conversions, shared by the CPU and CUDA kernels
// (one definition, so both devices round alike): bf16 (bfloat16: float32's exponent, 8-bit significand)
// and f16 (IEEE binary16). Kernels load them as float, compute in float32 and store them rounded to
// nearest even, as cuDNN, cuBLAS and PyTorch do; NaN stays NaN and overflow goes to infinity.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

// Host code built for a CPU with F16C converts f16 in hardware, with half.h's NaN patterns kept.
#if defined(__F16C__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#define CRUMB_HALF_F16C 1
#endif

namespace crumb {

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

namespace half_detail {
CRUMB_HOST_DEVICE uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
CRUMB_HOST_DEVICE float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
// Rounds away the low `shift` bits of r * 2^shift + rem to nearest, ties to even.
CRUMB_HOST_DEVICE uint32_t round_even(uint32_t r, uint32_t rem, uint32_t halfway) {
  return r + (rem > halfway || (rem == halfway && (r & 1u)));
}
}  // namespace half_detail

CRUMB_HOST_DEVICE float to_float(float x) { return x; }
CRUMB_HOST_DEVICE float to_float(bf16 x) { return half_detail::float_of(static_cast<uint32_t>(x.bits) << 16); }
CRUMB_HOST_DEVICE float to_float(f16 x) {
  using namespace half_detail;
#if CRUMB_HALF_F16C
  // vcvtph2ps would quiet a signalling NaN: infinities and NaNs take the formula below.
  if ((x.bits & 0x7c00u) != 0x7c00u) return _cvtsh_ss(x.bits);
#endif
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16, exp = (x.bits >> 10) & 0x1fu,
                 mant = x.bits & 0x3ffu;
  if (exp == 0x1f) return float_of(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    const float f = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -f : f;
  }
  return float_of(sign | ((exp + 112) << 23) | (mant << 13));
}

CRUMB_HOST_DEVICE bf16 to_bf16(float f) {
  const uint32_t u = half_detail::bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  return {static_cast<uint16_t>(half_detail::round_even(u >> 16, u & 0xffffu, 0x8000u))};
}

CRUMB_HOST_DEVICE f16 to_f16(float f) {
  using namespace half_detail;
  const uint32_t u = bits_of(f), sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
  if (abs >= 0x7f800000u) return {static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u))};
#if CRUMB_HALF_F16C
  return {static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))};
#endif
  if (abs >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // rounds past 65504
  if (abs < 0x38800000u) {  // below 2^-14: a subnormal half (units of 2^-24) or zero
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);
    if (shift > 24) return {static_cast<uint16_t>(sign)};
    return {static_cast<uint16_t>(sign | round_even(mant >> shift, mant & ((1u << shift) - 1), 1u << (shift - 1)))};
  }
  return {static_cast<uint16_t>(sign | round_even((abs - 0x38000000u) >> 13, abs & 0x1fffu, 0x1000u))};
}

// from_float<T>(x): x stored as T.
template <class T> CRUMB_HOST_DEVICE T from_float(float x);
template <> CRUMB_HOST_DEVICE float from_float<float>(float x) { return x; }
template <> CRUMB_HOST_DEVICE bf16 from_float<bf16>(float x) { return to_bf16(x); }
template <> CRUMB_HOST_DEVICE f16 from_float<f16>(float x) { return to_f16(x); }

// Arith<T>: what a kernel of storage type T computes in, and the type of what mixed precision keeps
// at full precision beside T's activations (normalisation parameters and statistics, probabilities):
// float32 for the 16-bit types, T itself for float and double.
template <class T> struct ArithOf {
  using type = T;
};
template <> struct ArithOf<bf16> {
  using type = float;
};
template <> struct ArithOf<f16> {
  using type = float;
};
template <class T> using Arith = typename ArithOf<T>::type;

}  // namespace crumb
