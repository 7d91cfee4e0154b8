// The bf16 linear forward on vdpbf16ps (kernels/cpu/linear_bf16.cc) against the path CPUs without
// AVX512_BF16 take: the float32 kernel on the bf16 values widened, its outputs rounded to bf16. Both run
// here whenever this CPU has AVX512_BF16, so the fallback stays tested beside the fast path. Products of
// bf16 values are exact in float32; the paths differ in the order (and, in vdpbf16ps, the rounding) of
// the float32 sums, so they agree within the sums' float32 error plus one bf16 rounding of the output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/dpbf16.h"
#include "kernels/half.h"
#include "kernels/linear.h"
#include "tests/bf16_values.h"

namespace crumb {
namespace {

struct Case {
  int n, in, out;
  bool relu, bias;
};

void expect_paths_agree(const Case& c) {
  std::mt19937 rng(c.n * 131 + c.in * 7 + c.out);
  const auto x = random_bf16(std::size_t(c.n) * c.in, rng), w = random_bf16(std::size_t(c.out) * c.in, rng);
  const auto b = random_bf16(c.out, rng);
  std::vector<bf16> fast(std::size_t(c.n) * c.out);
  cpu::linear_forward_bf16(fast.data(), x.data(), w.data(), c.bias ? b.data() : nullptr, c.n, c.in, c.out, c.relu);
  const auto xf = widened(x), wf = widened(w), bf = widened(b);
  std::vector<float> slow(fast.size()), ws(cpu::linear_forward_workspace(c.n, c.in, c.out));
  cpu::linear_forward<float>(slow.data(), xf.data(), wf.data(), c.bias ? bf.data() : nullptr, c.n, c.in, c.out,
                             ws.data(), c.relu);
  for (int i = 0; i < c.n; ++i)
    for (int o = 0; o < c.out; ++o) {
      double magnitude = c.bias ? std::fabs(bf[o]) : 0.0;
      for (int k = 0; k < c.in; ++k) magnitude += std::fabs(double(xf[i * c.in + k]) * wf[o * c.in + k]);
      const float fallback = to_float(to_bf16(slow[i * c.out + o]));
      const float got = to_float(fast[i * c.out + o]);
      // One bf16 ulp of the output (2^-8 relative, either rounding) plus float32 summation error.
      const double tol = std::ldexp(std::fabs(fallback), -7) + 1e-6 * magnitude;
      ASSERT_NEAR(got, fallback, tol) << "n " << c.n << " in " << c.in << " out " << c.out << " at (" << i << ", " << o << ")";
      if (c.relu) {
        ASSERT_GE(got, 0.0f);
      }
    }
}

TEST(LinearBf16, DotProductPathMatchesTheWidenedFloat32Path) {
  if (!cpu::has_bf16_dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  // Edges of both 4 x 4 tiles, `in` under, at and past a 32-pair block, and a layer of lenet5's size.
  for (const Case& c : {Case{1, 1, 1, false, true}, Case{3, 31, 5, false, false}, Case{4, 32, 4, true, true},
                        Case{7, 33, 9, true, true}, Case{9, 100, 6, false, true}, Case{64, 400, 120, true, true}})
    expect_paths_agree(c);
}

// Each output is one dot product in a fixed order: the same sample gives the same bits whatever the
// batch it runs in (the micro-batch size must not change results).
TEST(LinearBf16, SampleResultsDoNotDependOnTheBatch) {
  if (!cpu::has_bf16_dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937 rng(3);
  const int n = 11, in = 70, out = 7;
  const auto x = random_bf16(std::size_t(n) * in, rng), w = random_bf16(std::size_t(out) * in, rng);
  const auto b = random_bf16(out, rng);
  std::vector<bf16> whole(std::size_t(n) * out), one(out);
  cpu::linear_forward_bf16(whole.data(), x.data(), w.data(), b.data(), n, in, out);
  for (int i = 0; i < n; ++i) {
    cpu::linear_forward_bf16(one.data(), x.data() + i * in, w.data(), b.data(), 1, in, out);
    for (int o = 0; o < out; ++o) ASSERT_EQ(one[o].bits, whole[i * out + o].bits) << i << ", " << o;
  }
}

#if CRUMB_DPBF16
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// One lane of vdpbf16ps: acc + a0 * b0 + a1 * b1.
CRUMB_TARGET_DPBF16 float dot_pair(float acc, bf16 a0, bf16 a1, bf16 b0, bf16 b1) {
  const __m512i a = _mm512_set1_epi32(static_cast<int>(a0.bits | uint32_t{a1.bits} << 16));
  const __m512i b = _mm512_set1_epi32(static_cast<int>(b0.bits | uint32_t{b1.bits} << 16));
  return _mm_cvtss_f32(_mm512_castps512_ps128(_mm512_dpbf16_ps(_mm512_set1_ps(acc), (__m512bh)a, (__m512bh)b)));
}

// What docs/precision.md says of the instruction's rounding, on this CPU.
TEST(LinearBf16, DotPairRoundsEachAddAndFlushesSubnormals) {
  if (!cpu::has_bf16_dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  const bf16 one = to_bf16(1.0f), zero{0};
  // 1 + 2^-24 + 2^-24: each add rounds to nearest even (one rounding of the whole would give 1 + 2^-23).
  EXPECT_EQ(dot_pair(1.0f, to_bf16(std::ldexp(1.0f, -24)), to_bf16(std::ldexp(1.0f, -24)), one, one), 1.0f);
  // A subnormal bf16 operand (2^-133) is zero: times 2^100 it would be 2^-33.
  EXPECT_EQ(dot_pair(0.0f, bf16{1}, zero, to_bf16(std::ldexp(1.0f, 100)), zero), 0.0f);
  // A subnormal product (2^-64 * 2^-70) is flushed, and a subnormal sum read as zero.
  EXPECT_EQ(dot_pair(0.0f, to_bf16(std::ldexp(1.0f, -64)), zero, to_bf16(std::ldexp(1.0f, -70)), zero), 0.0f);
  EXPECT_EQ(dot_pair(bits_float(0x00200000u), zero, zero, zero, zero), 0.0f);
  // The float32 path keeps them: the products are exact there.
  EXPECT_GT(std::ldexp(1.0f, -64) * std::ldexp(1.0f, -70), 0.0f);
}
#endif

// ---- AMX (kernels/cpu/linear_amx.cc): the three passes against the float32 kernels on the widened values.
// The products are exact in float32 either way; the forward and the data gradient differ by their float32
// sums' order and one bf16 rounding, the weight gradient (float32) by the order alone.
struct AmxCase {
  int n, in, out;
};
// Tile edges on every side: 1, under, at and past 16 and 32 in every dimension, and lenet5's and an mlp's.
const AmxCase kAmxCases[] = {{1, 1, 1},    {3, 31, 5},    {16, 32, 16},  {17, 33, 17},
                             {40, 70, 35}, {64, 400, 120}, {33, 784, 100}};

double tol_bf16(float fallback, double magnitude) { return std::ldexp(std::fabs(fallback), -7) + 1e-6 * magnitude; }

TEST(LinearAmx, ForwardMatchesTheWidenedFloat32Path) {
  if (!cpu::uses_amx()) GTEST_SKIP() << "this CPU (or its kernel) has no AMX-BF16";
  for (const AmxCase& c : kAmxCases)
    for (bool relu : {false, true}) {
      std::mt19937 rng(c.n * 7 + c.in * 3 + c.out + relu);
      const auto x = random_bf16(std::size_t(c.n) * c.in, rng), w = random_bf16(std::size_t(c.out) * c.in, rng);
      const auto b = random_bf16(c.out, rng);
      std::vector<bf16> fast(std::size_t(c.n) * c.out), ws(cpu::linear_amx_workspace(c.n, c.in, c.out));
      cpu::linear_forward_amx(fast.data(), x.data(), w.data(), b.data(), c.n, c.in, c.out, ws.data(), relu);
      const auto xf = widened(x), wf = widened(w), bf = widened(b);
      // A float32 bias (where the graph keeps it so) of the same values: the same bits.
      std::vector<bf16> float_bias(fast.size());
      cpu::linear_forward_amx(float_bias.data(), x.data(), w.data(), bf.data(), c.n, c.in, c.out, ws.data(), relu);
      for (std::size_t i = 0; i < fast.size(); ++i) ASSERT_EQ(float_bias[i].bits, fast[i].bits) << i;
      std::vector<float> slow(fast.size()), wsf(cpu::linear_forward_workspace(c.n, c.in, c.out));
      cpu::linear_forward<float>(slow.data(), xf.data(), wf.data(), bf.data(), c.n, c.in, c.out, wsf.data(), relu);
      for (int i = 0; i < c.n; ++i)
        for (int o = 0; o < c.out; ++o) {
          double magnitude = std::fabs(bf[o]);
          for (int k = 0; k < c.in; ++k) magnitude += std::fabs(double(xf[i * c.in + k]) * wf[o * c.in + k]);
          const float fallback = to_float(to_bf16(slow[i * c.out + o])), got = to_float(fast[i * c.out + o]);
          ASSERT_NEAR(got, fallback, tol_bf16(fallback, magnitude))
              << "n " << c.n << " in " << c.in << " out " << c.out << " at (" << i << ", " << o << ")";
        }
    }
}

TEST(LinearAmx, SampleResultsDoNotDependOnTheBatch) {
  if (!cpu::uses_amx()) GTEST_SKIP() << "this CPU (or its kernel) has no AMX-BF16";
  std::mt19937 rng(3);
  const int n = 37, in = 70, out = 19;
  const auto x = random_bf16(std::size_t(n) * in, rng), w = random_bf16(std::size_t(out) * in, rng);
  const auto b = random_bf16(out, rng);
  std::vector<bf16> whole(std::size_t(n) * out), one(out), ws(cpu::linear_amx_workspace(n, in, out));
  cpu::linear_forward_amx(whole.data(), x.data(), w.data(), b.data(), n, in, out, ws.data());
  for (int i = 0; i < n; ++i) {
    cpu::linear_forward_amx(one.data(), x.data() + i * in, w.data(), b.data(), 1, in, out, ws.data());
    for (int o = 0; o < out; ++o) ASSERT_EQ(one[o].bits, whole[i * out + o].bits) << i << ", " << o;
  }
}

TEST(LinearAmx, DataGradientMatchesTheWidenedFloat32Path) {
  if (!cpu::uses_amx()) GTEST_SKIP() << "this CPU (or its kernel) has no AMX-BF16";
  for (const AmxCase& c : kAmxCases)
    for (bool accumulate : {false, true}) {
      std::mt19937 rng(c.n * 5 + c.in * 11 + c.out + accumulate);
      const auto dy = random_bf16(std::size_t(c.n) * c.out, rng), w = random_bf16(std::size_t(c.out) * c.in, rng);
      const auto before = random_bf16(std::size_t(c.n) * c.in, rng);
      std::vector<bf16> fast = before, ws(cpu::linear_amx_workspace(c.n, c.in, c.out));
      cpu::linear_backward_data_amx(fast.data(), dy.data(), w.data(), c.n, c.in, c.out, ws.data(), accumulate);
      const auto dyf = widened(dy), wf = widened(w);
      std::vector<float> slow = widened(before), wsf(cpu::linear_backward_data_workspace(c.in, c.out));
      cpu::linear_backward_data<float>(slow.data(), dyf.data(), wf.data(), c.n, c.in, c.out, wsf.data(), accumulate);
      for (int i = 0; i < c.n; ++i)
        for (int k = 0; k < c.in; ++k) {
          double magnitude = accumulate ? std::fabs(to_float(before[i * c.in + k])) : 0.0;
          for (int o = 0; o < c.out; ++o) magnitude += std::fabs(double(dyf[i * c.out + o]) * wf[o * c.in + k]);
          const float fallback = to_float(to_bf16(slow[i * c.in + k])), got = to_float(fast[i * c.in + k]);
          ASSERT_NEAR(got, fallback, tol_bf16(fallback, magnitude))
              << "n " << c.n << " in " << c.in << " out " << c.out << " at (" << i << ", " << k << ")"
              << (accumulate ? " +=" : " =");
        }
    }
}

TEST(LinearAmx, WeightGradientMatchesTheFloat32Kernel) {
  if (!cpu::uses_amx()) GTEST_SKIP() << "this CPU (or its kernel) has no AMX-BF16";
  for (const AmxCase& c : kAmxCases)
    for (bool accumulate : {false, true}) {
      std::mt19937 rng(c.n * 3 + c.in * 13 + c.out + accumulate);
      const auto dy = random_bf16(std::size_t(c.n) * c.out, rng), x = random_bf16(std::size_t(c.n) * c.in, rng);
      const std::vector<float> dw0 = widened(random_bf16(std::size_t(c.out) * c.in, rng)),
                               db0 = widened(random_bf16(c.out, rng));
      std::vector<float> dw = dw0, db = db0;
      std::vector<bf16> ws(cpu::linear_amx_workspace(c.n, c.in, c.out));
      cpu::linear_backward_weight_amx(dw.data(), db.data(), dy.data(), x.data(), c.n, c.in, c.out, ws.data(), accumulate);
      const auto dyf = widened(dy), xf = widened(x);
      std::vector<float> dws = dw0, dbs = db0;
      cpu::linear_backward_weight<float>(dws.data(), dbs.data(), dyf.data(), xf.data(), c.n, c.in, c.out, accumulate);
      for (int o = 0; o < c.out; ++o) {
        double bias_magnitude = accumulate ? std::fabs(db0[o]) : 0.0;
        for (int i = 0; i < c.n; ++i) bias_magnitude += std::fabs(dyf[i * c.out + o]);
        ASSERT_NEAR(db[o], dbs[o], 1e-5 * bias_magnitude + 1e-30) << "db " << o << (accumulate ? " +=" : " =");
        for (int k = 0; k < c.in; ++k) {
          double magnitude = accumulate ? std::fabs(dw0[o * c.in + k]) : 0.0;
          for (int i = 0; i < c.n; ++i) magnitude += std::fabs(double(dyf[i * c.out + o]) * xf[i * c.in + k]);
          ASSERT_NEAR(dw[o * c.in + k], dws[o * c.in + k], 1e-5 * magnitude + 1e-30)
              << "n " << c.n << " in " << c.in << " out " << c.out << " at (" << o << ", " << k << ")"
              << (accumulate ? " +=" : " =");
        }
      }
    }
}

}  // namespace
}  // namespace crumb
