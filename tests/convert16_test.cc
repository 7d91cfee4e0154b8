// The SIMD runs of kernels/cpu/convert16.h against kernels/half.h's element-by-element conversions, bit
// for bit: every f16 and bf16 pattern widened, and a sweep of floats narrowed (every combination of the
// top 19 bits with low bits at and around the rounding boundaries of both types, plus NaNs with
// payloads, infinities, subnormals and values past the largest finite f16). Runs of odd lengths cover
// the element-by-element tails. The element-by-element path itself is checked against an independent
// reference in half_test.cc.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/convert16.h"
#include "kernels/half.h"

namespace crumb {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<float> float_sweep() {
  std::vector<float> v;
  std::mt19937 rng(7);
  const uint32_t lows[] = {0x0, 0x1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x7fff, 0x8000, 0x8001, 0xffff};
  for (uint32_t hi = 0; hi < (1u << 19); ++hi) {
    for (uint32_t low : lows) {
      uint32_t u = (hi << 13) | (low & 0x1fff);
      if (low > 0x1fff) u = ((hi << 13) & 0xffff0000u) | low;  // bf16's boundaries: the low 16 bits
      float f;
      std::memcpy(&f, &u, 4);
      v.push_back(f);
    }
    uint32_t u = (hi << 13) | (rng() & 0x1fff);
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  return v;
}

template <class T> void expect_widening_exact() {
  std::vector<T> all(65536 + 5);
  for (std::size_t i = 0; i < all.size(); ++i) all[i].bits = static_cast<uint16_t>(i);
  std::vector<float> simd(all.size()), scalar(all.size());
  cpu::to_float_run(simd.data(), all.data(), all.size(), true);
  cpu::to_float_run(scalar.data(), all.data(), all.size(), false);
  for (std::size_t i = 0; i < all.size(); ++i) {
    ASSERT_EQ(bits(scalar[i]), bits(to_float(all[i]))) << i;
    ASSERT_EQ(bits(simd[i]), bits(scalar[i])) << "pattern 0x" << std::hex << all[i].bits;
  }
}

template <class T> void expect_narrowing_exact() {
  const std::vector<float> x = float_sweep();
  std::vector<T> simd(x.size()), scalar(x.size());
  // An odd length, so that the last few go through the element-by-element tail.
  cpu::from_float_run(simd.data(), x.data(), x.size() - 3, true);
  cpu::from_float_run(simd.data() + x.size() - 3, x.data() + x.size() - 3, 3, true);
  cpu::from_float_run(scalar.data(), x.data(), x.size(), false);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(scalar[i].bits, from_float<T>(x[i]).bits) << i;
    ASSERT_EQ(simd[i].bits, scalar[i].bits) << "float 0x" << std::hex << bits(x[i]);
  }
}

TEST(Convert16, SweepCoversTheSpecialValues) {
  const std::vector<float> x = float_sweep();
  int nan_payloads = 0, infinities = 0, subnormals = 0, f16_overflows = 0;
  for (float f : x) {
    const uint32_t a = bits(f) & 0x7fffffffu;
    nan_payloads += a > 0x7fc00000u || (a > 0x7f800000u && a < 0x7fc00000u);
    infinities += a == 0x7f800000u;
    subnormals += a != 0 && a < 0x00800000u;
    f16_overflows += a >= 0x477ff000u && a < 0x7f800000u;
  }
  EXPECT_GT(nan_payloads, 1000);
  EXPECT_GE(infinities, 2);
  EXPECT_GT(subnormals, 1000);
  EXPECT_GT(f16_overflows, 1000);
}

TEST(Convert16, F16WideningIsSoftwaresBitForBit) {
  if (!cpu::has_simd16()) GTEST_SKIP() << "this CPU has no AVX2 and F16C";
  expect_widening_exact<f16>();
}
TEST(Convert16, Bf16WideningIsSoftwaresBitForBit) {
  if (!cpu::has_simd16()) GTEST_SKIP() << "this CPU has no AVX2 and F16C";
  expect_widening_exact<bf16>();
}
TEST(Convert16, F16NarrowingIsSoftwaresBitForBit) {
  if (!cpu::has_simd16()) GTEST_SKIP() << "this CPU has no AVX2 and F16C";
  expect_narrowing_exact<f16>();
}
TEST(Convert16, Bf16NarrowingIsSoftwaresBitForBit) {
  if (!cpu::has_simd16()) GTEST_SKIP() << "this CPU has no AVX2 and F16C";
  expect_narrowing_exact<bf16>();
}

}  // namespace
}  // namespace crumb
