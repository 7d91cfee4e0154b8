// The 16-bit storage types (kernels/half.h) against an independent reference: every bf16 and f16 bit
// pattern decoded by ldexp, and float -> 16-bit rounding chosen by distance, in long double, between the
// two neighbouring 16-bit values (ties to the even pattern, past the largest finite value to infinity).
// Then the convert kernels (kernels/convert.h) built on them: the CPU's, with and without accumulate, and
// CUDA's against the CPU's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/device/buffer.h"
#include "kernels/convert.h"
#include "kernels/half.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

float float_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A 16-bit IEEE-style format: 1 sign bit, exp_bits of exponent, the rest significand.
struct Format {
  DType dtype;
  int exp_bits;
  int mant_bits() const { return 15 - exp_bits; }
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint16_t inf_bits() const { return static_cast<uint16_t>(((1u << exp_bits) - 1) << mant_bits()); }

  // The value of a bit pattern, from its fields.
  long double decode(uint16_t bits) const {
    const int exp = (bits >> mant_bits()) & ((1 << exp_bits) - 1);
    const int64_t mant = bits & ((1 << mant_bits()) - 1);
    long double v;
    if (exp == (1 << exp_bits) - 1)
      v = mant ? std::numeric_limits<long double>::quiet_NaN() : std::numeric_limits<long double>::infinity();
    else if (exp == 0)
      v = std::ldexp(static_cast<long double>(mant), 1 - bias() - mant_bits());
    else
      v = std::ldexp(static_cast<long double>(mant + (int64_t{1} << mant_bits())), exp - bias() - mant_bits());
    return bits & 0x8000u ? -v : v;
  }

  // f rounded to nearest, ties to even, the non-negative finite values ascending by pattern (so a
  // pattern's index is its bits) and one past the largest: where the next value would be, which rounds
  // to infinity.
  uint16_t round(float f, const std::vector<long double>& ascending) const {
    const uint16_t sign = std::signbit(f) ? 0x8000u : 0;
    const long double a = std::fabs(static_cast<long double>(f));
    const auto lo = static_cast<std::size_t>(std::upper_bound(ascending.begin(), ascending.end(), a) - ascending.begin()) - 1;
    if (lo + 1 == ascending.size()) return sign | inf_bits();  // infinity, or past the virtual next value
    const long double below = a - ascending[lo], above = ascending[lo + 1] - a;
    const std::size_t pick = below < above ? lo : above < below ? lo + 1 : lo % 2 == 0 ? lo : lo + 1;
    return static_cast<uint16_t>(sign | pick);
  }

  // The reference table of round(): every non-negative finite value, then the virtual next one.
  std::vector<long double> ascending() const {
    std::vector<long double> v;
    for (uint16_t b = 0; b < inf_bits(); ++b) v.push_back(decode(b));
    v.push_back(2 * v.back() - v[v.size() - 2]);
    return v;
  }
};

// Both formats, in every test of one process: every test is a process of its own under ctest.
const Format kFormats[] = {{DType::BF16, 8}, {DType::F16, 5}};

// The functions under test, by dtype.
float to_float_as(DType t, uint16_t bits) { return t == DType::BF16 ? to_float(bf16{bits}) : to_float(f16{bits}); }
uint16_t from_float_as(DType t, float f) { return t == DType::BF16 ? to_bf16(f).bits : to_f16(f).bits; }

// Every pattern decodes to its value; every non-NaN one converts back to itself, every NaN to a NaN.
TEST(HalfFormat, EveryPatternDecodesAndRoundTrips) {
  for (const Format& fmt : kFormats) {
    SCOPED_TRACE(dtype_name(fmt.dtype));
    for (uint32_t b = 0; b < 0x10000u; ++b) {
      const auto bits = static_cast<uint16_t>(b);
      const long double want = fmt.decode(bits);
      const float got = to_float_as(fmt.dtype, bits);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << std::hex << b;
        ASSERT_TRUE(std::isnan(to_float_as(fmt.dtype, from_float_as(fmt.dtype, got)))) << std::hex << b;
        continue;
      }
      ASSERT_EQ(static_cast<long double>(got), want) << std::hex << b;
      ASSERT_EQ(std::signbit(got), (b & 0x8000u) != 0) << std::hex << b;
      ASSERT_EQ(from_float_as(fmt.dtype, got), bits) << std::hex << b;
    }
  }
}

// Floats that probe the rounding: every 16-bit value, the midpoint between each pair of neighbours (an
// exact tie) and the floats either side of it, the halfway point to infinity and the point past it, float
// subnormals, the extremes, and random bit patterns over the whole float range and over the format's range.
std::vector<float> probes(const Format& fmt) {
  std::vector<float> out;
  const std::vector<long double> asc = fmt.ascending();
  for (std::size_t i = 0; i + 1 < asc.size(); ++i) {
    const auto v = static_cast<float>(asc[i]), mid = static_cast<float>((asc[i] + asc[i + 1]) / 2);
    EXPECT_EQ(static_cast<long double>(mid), (asc[i] + asc[i + 1]) / 2) << "a midpoint is not a float";
    for (float f : {v, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
  // The virtual next value past the largest (f16: 65536; bf16: 2^128, infinity as a float).
  const auto past = static_cast<float>(asc.back());
  for (float f : {past, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(), 0.0f, 1e30f})
    out.insert(out.end(), {f, -f, std::nextafter(f, 0.0f), std::nextafter(f, INFINITY)});
  std::mt19937 gen(5);
  std::uniform_int_distribution<uint32_t> any;
  // Exponents from the format's smallest subnormal's to past its largest value's.
  const int lowest = 1 - fmt.bias() - fmt.mant_bits() + 127 - 2, highest = std::min(254, fmt.bias() + 1 + 127 + 1);
  std::uniform_int_distribution<uint32_t> in_range(static_cast<uint32_t>(std::max(0, lowest)), static_cast<uint32_t>(highest));
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = any(gen);
    if (!std::isnan(float_of_bits(u))) out.push_back(float_of_bits(u));
    out.push_back(float_of_bits((u & 0x807fffffu) | (in_range(gen) << 23)));
  }
  return out;
}

TEST(HalfFormat, FloatsRoundToNearestEven) {
  for (const Format& fmt : kFormats) {
    SCOPED_TRACE(dtype_name(fmt.dtype));
    const std::vector<long double> asc = fmt.ascending();
    for (float f : probes(fmt)) {
      const uint16_t want = fmt.round(f, asc), got = from_float_as(fmt.dtype, f);
      ASSERT_EQ(got, want) << std::hexfloat << f << std::hex << ": got 0x" << got << ", want 0x" << want;
    }
  }
}

// Every NaN, quiet or signalling, of either sign, stays NaN: not infinity, which dropping the low
// significand bits of a signalling NaN (0x7f800001) would give.
TEST(HalfFormat, NaNsStayNaN) {
  for (const Format& fmt : kFormats)
    for (uint32_t u : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7f810000u, 0x7fffffffu}) {
      ASSERT_TRUE(std::isnan(float_of_bits(u)));
      EXPECT_TRUE(std::isnan(to_float_as(fmt.dtype, from_float_as(fmt.dtype, float_of_bits(u)))))
          << dtype_name(fmt.dtype) << " " << std::hex << u;
    }
}

// ---- The convert kernels: F32, BF16 and F16 to each other.

constexpr DType kConvertible[] = {DType::F32, DType::BF16, DType::F16};

// count elements of dtype t holding these values (rounded to t), as bytes.
std::vector<char> stored_as(DType t, const std::vector<float>& values) {
  std::vector<char> out(values.size() * dtype_size(t));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (t == DType::F32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t b = from_float_as(t, values[i]);
      std::memcpy(out.data() + 2 * i, &b, 2);
    }
  }
  return out;
}
float element(DType t, const std::vector<char>& bytes, std::size_t i) {
  if (t == DType::F32) {
    float f;
    std::memcpy(&f, bytes.data() + 4 * i, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, bytes.data() + 2 * i, 2);
  return to_float_as(t, b);
}

// Enough elements for the CPU kernel's threads (kernels/cpu/kernel_util.h's grain is 32768), a ragged
// count, values over the range of every dtype with the odd overflow, NaN and infinity.
std::vector<float> convert_inputs(unsigned seed) {
  std::vector<float> v = test::random_floats(70001, seed, -3, 3);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> exponent(-30, 20);
  for (float& f : v) f = std::ldexp(f, exponent(gen));
  v[5] = std::numeric_limits<float>::quiet_NaN();
  v[6] = -std::numeric_limits<float>::infinity();
  v[7] = 1e30f;
  return v;
}

// The values of count elements of dtype t.
std::vector<float> values_of(DType t, const std::vector<char>& bytes) {
  std::vector<float> out(bytes.size() / dtype_size(t));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = element(t, bytes, i);
  return out;
}

// What converting src into dst (holding old_dst) gives: src's value (exact in float), plus dst's in
// float32 with accumulate, rounded to dst's dtype.
std::vector<float> converted(DType dst_t, const std::vector<char>& old_dst, DType src_t, const std::vector<char>& src,
                             bool accumulate) {
  std::vector<float> want = values_of(src_t, src);
  const std::vector<float> old = values_of(dst_t, old_dst);
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (accumulate) want[i] += old[i];
    want[i] = dst_t == DType::F32 ? want[i] : to_float_as(dst_t, from_float_as(dst_t, want[i]));
  }
  return want;
}

TEST(Convert, CpuEveryPairWithAndWithoutAccumulate) {
  for (DType dst_t : kConvertible)
    for (DType src_t : kConvertible)
      for (bool accumulate : {false, true}) {
        const std::string what = std::string(dtype_name(src_t)) + " -> " + dtype_name(dst_t) + (accumulate ? " accumulate" : "");
        const std::vector<char> src = stored_as(src_t, convert_inputs(1)), old_dst = stored_as(dst_t, convert_inputs(2));
        std::vector<char> dst = old_dst;
        cpu::convert(dst.data(), dst_t, src.data(), src_t, src.size() / dtype_size(src_t), accumulate);
        test::expect_same(values_of(dst_t, dst), converted(dst_t, old_dst, src_t, src, accumulate), what);
      }
}

TEST(Convert, CpuRejectsOtherDTypes) {
  double d = 0;
  float f = 0;
  EXPECT_NE(test::error_of([&] { cpu::convert(&f, DType::F32, &d, DType::F64, 1); }).find("cannot convert from F64"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { cpu::convert(&d, DType::F64, &f, DType::F32, 1); }).find("cannot convert to F64"),
            std::string::npos);
}

// The CUDA kernel rounds as the CPU's (one definition in kernels/half.h): the same values for every pair.
TEST(Convert, CudaMatchesCpu) {
  CRUMB_REQUIRE_GPU();
  Backend& gpu = backend(Device::CUDA);
  for (DType dst_t : kConvertible)
    for (DType src_t : kConvertible)
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(src_t)) + " -> " + dtype_name(dst_t) + (accumulate ? " accumulate" : ""));
        const std::vector<char> src = stored_as(src_t, convert_inputs(3)), old_dst = stored_as(dst_t, convert_inputs(4));
        const std::size_t count = src.size() / dtype_size(src_t);
        std::vector<char> want = old_dst, got(old_dst.size());
        cpu::convert(want.data(), dst_t, src.data(), src_t, count, accumulate);
        Buffer d_src(src.size(), Memory::Cuda), d_dst(old_dst.size(), Memory::Cuda);
        copy_bytes(d_src.data(), Memory::Cuda, src.data(), Memory::Host, src.size());
        copy_bytes(d_dst.data(), Memory::Cuda, old_dst.data(), Memory::Host, old_dst.size());
        gpu.convert(d_dst.data(), dst_t, d_src.data(), src_t, count, accumulate);
        gpu.synchronize();
        copy_bytes(got.data(), Memory::Host, d_dst.data(), Memory::Cuda, got.size());
        // NaN on both sides agrees: the GPU's arithmetic makes its own NaN.
        test::expect_same(values_of(dst_t, got), values_of(dst_t, want), "CUDA against the CPU");
      }
}

}  // namespace
}  // namespace crumb
