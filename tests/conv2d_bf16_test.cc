// The bf16 convolution forward on vdpbf16ps (kernels/cpu/conv2d_bf16.cc) against the path CPUs without
// AVX512_BF16 take: the float32 kernel on the bf16 values widened, its outputs rounded to bf16. Both run
// here whenever this CPU has AVX512_BF16, so the fallback stays tested beside the fast path. Products of
// bf16 values are exact in float32; the paths differ in the order (and, in vdpbf16ps, the rounding) of
// the float32 sums, so they agree within the sums' float32 error plus one bf16 rounding of the output.
#include <gtest/gtest.h>

#include <cmath>
#include <omp.h>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/bf16_dot.h"
#include "kernels/conv2d.h"
#include "kernels/half.h"
#include "tests/bf16_values.h"

namespace crumb {
namespace {

cpu::Conv2dShape conv(int n, int c_in, int hw, int c_out, int k, int stride, int pad, int groups = 1) {
  const int out = (hw + 2 * pad - k) / stride + 1;
  return {n, c_in, hw, hw, c_out, k, k, stride, stride, pad, pad, out, out, groups};
}

// allow_amx(amx) for a scope.
class AmxAllowed {
 public:
  explicit AmxAllowed(bool amx) { cpu::allow_amx(amx); }
  ~AmxAllowed() { cpu::allow_amx(true); }
  AmxAllowed(const AmxAllowed&) = delete;
  AmxAllowed& operator=(const AmxAllowed&) = delete;
};

// body() in every tile path this CPU has: vdpbf16ps, and AMX where uses_amx().
template <class F> void in_every_tile_path(F&& body) {
  for (bool amx : cpu::uses_amx() ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
    SCOPED_TRACE(amx ? "AMX" : "vdpbf16ps");
    const AmxAllowed allowed(amx);
    body();
  }
}

std::vector<float> magnitudes(std::vector<float> v) {
  for (float& e : v) e = std::fabs(e);
  return v;
}

// fast against the float32 path's slow rounded to bf16: one bf16 ulp of the output (2^-8 relative, either
// rounding) plus float32 summation error (magnitude: the same kernel over |operands|).
void expect_within_one_rounding(const std::vector<bf16>& fast, const std::vector<float>& slow,
                                const std::vector<float>& magnitude, const cpu::Conv2dShape& s, const char* what) {
  for (std::size_t i = 0; i < fast.size(); ++i) {
    const float fallback = to_float(to_bf16(slow[i])), got = to_float(fast[i]);
    const double tol = std::ldexp(std::fabs(fallback), -7) + 1e-6 * magnitude[i];
    ASSERT_NEAR(got, fallback, tol) << "element " << i << " of c_in " << s.c_in << " c_out " << s.c_out << " k "
                                    << s.kh << " stride " << s.stride_h << " pad " << s.pad_h << " groups " << s.groups
                                    << what;
  }
}

std::vector<bf16> run_fast(const cpu::Conv2dShape& s, const std::vector<bf16>& x, const std::vector<bf16>& w,
                           const bf16* b, bool relu) {
  std::vector<bf16> y(s.out_count()), ws(cpu::conv2d_forward_bf16_workspace(s));
  cpu::conv2d_forward_bf16(y.data(), x.data(), w.data(), b, s, ws.data(), relu);
  return y;
}

void expect_paths_agree(const cpu::Conv2dShape& s, bool relu) {
  std::mt19937 rng(s.c_in * 31 + s.c_out * 7 + s.h + s.kh);
  const std::size_t w_count = std::size_t(s.c_out) * (s.c_in / s.groups) * s.kh * s.kw;
  const auto x = random_bf16(s.in_count(), rng), w = random_bf16(w_count, rng), b = random_bf16(s.c_out, rng);
  const std::vector<bf16> fast = run_fast(s, x, w, b.data(), relu);
  const auto xf = widened(x), wf = widened(w), bf = widened(b);
  std::vector<float> slow(s.out_count()), ws(cpu::conv2d_forward_workspace(s));
  cpu::conv2d_forward<float>(slow.data(), xf.data(), wf.data(), bf.data(), s, ws.data(), relu);
  // Each output's sum of |x w| (and |b|): the float32 kernel on the magnitudes.
  std::vector<float> magnitude(s.out_count());
  cpu::conv2d_forward<float>(magnitude.data(), magnitudes(xf).data(), magnitudes(wf).data(), magnitudes(bf).data(), s,
                             ws.data(), false);
  expect_within_one_rounding(fast, slow, magnitude, s, relu ? " relu" : "");
  if (relu) {
    for (const bf16& v : fast) ASSERT_GE(to_float(v), 0.0f);
  }
}

TEST(Conv2dBf16, DotProductPathMatchesTheWidenedFloat32Path) {
  if (!cpu::has_bf16_dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  in_every_tile_path([] {
    // Odd and even rows per group (k), channel counts off the 8-row tiles, maps off the 16 and 32-pixel
    // vectors, strides, padding, 1x1, grouped and depthwise.
    expect_paths_agree(conv(2, 3, 9, 5, 3, 1, 1), false);
    expect_paths_agree(conv(3, 4, 8, 16, 3, 1, 1), true);
    expect_paths_agree(conv(2, 6, 28, 6, 5, 1, 2), true);
    expect_paths_agree(conv(2, 16, 11, 9, 3, 2, 1), false);
    expect_paths_agree(conv(2, 8, 7, 12, 1, 1, 0), true);
    expect_paths_agree(conv(2, 8, 10, 12, 3, 1, 1, 4), false);
    expect_paths_agree(conv(2, 8, 10, 8, 3, 1, 1, 8), true);
    expect_paths_agree(conv(9, 16, 16, 32, 3, 1, 1), true);
    // AMX's tiles: pairs padded to whole tiles (24 pairs as 2 x 12, 17 as 2 x 9), output channels to 16
    // (a block of 32 and one of 16), grouped, 1x1, and more than one tile of pairs per tap.
    expect_paths_agree(conv(2, 48, 9, 40, 3, 1, 1), true);
    expect_paths_agree(conv(2, 34, 7, 17, 5, 1, 2), false);
    expect_paths_agree(conv(2, 64, 6, 32, 3, 1, 1, 2), true);
    expect_paths_agree(conv(3, 32, 7, 16, 1, 1, 0), false);
    expect_paths_agree(conv(2, 80, 5, 64, 3, 1, 0), true);
    // Stride 2 on AMX, through the input's phases (3x3: four; odd maps, 5x5); 1x1 on its own path.
    expect_paths_agree(conv(2, 16, 11, 32, 3, 2, 1), true);
    expect_paths_agree(conv(3, 8, 9, 16, 3, 2, 1), false);
    expect_paths_agree(conv(2, 16, 10, 32, 1, 2, 0), false);
    expect_paths_agree(conv(2, 20, 13, 24, 3, 2, 1), true);
    expect_paths_agree(conv(2, 8, 12, 16, 5, 2, 2), false);
    // 33 channels (17 pairs padded to 18), groups of 20 output channels, stride 2 with 2x2 and 1x3 kernels.
    expect_paths_agree(conv(2, 33, 7, 16, 3, 1, 1), true);
    expect_paths_agree(conv(2, 64, 6, 40, 3, 1, 1, 2), false);
    expect_paths_agree(conv(2, 16, 10, 32, 2, 2, 0), true);
    expect_paths_agree(cpu::Conv2dShape{2, 16, 9, 11, 32, 1, 3, 2, 2, 0, 1, 5, 6, 1}, false);
  });
}

// allow_amx switches the tile path, and the workspace sizes are the larger path's under either setting:
// a plan compiled with AMX off runs with it on (AMX pads its tiles and sums in float32, stride 2 goes
// through the phases: more workspace than vdpbf16ps takes).
TEST(Conv2dBf16, WorkspaceCoversEitherTilePath) {
  if (!cpu::uses_amx()) GTEST_SKIP() << "this CPU (or its kernel) has no AMX-BF16";
  for (const cpu::Conv2dShape& s : {conv(2, 34, 7, 17, 5, 1, 2), conv(3, 16, 11, 32, 3, 2, 1)}) {
    std::size_t forward[2], data[2];
    for (bool amx : {false, true}) {
      const AmxAllowed allowed(amx);
      EXPECT_EQ(cpu::uses_amx(), amx);
      forward[amx] = cpu::conv2d_forward_bf16_workspace(s);
      data[amx] = cpu::conv2d_backward_data_bf16_workspace(s);
    }
    EXPECT_EQ(forward[0], forward[1]);
    EXPECT_EQ(data[0], data[1]);
    // Sized with AMX off, run with it on.
    std::mt19937 rng(1);
    const std::size_t w_count = std::size_t(s.c_out) * s.c_in * s.kh * s.kw;
    const auto x = random_bf16(s.in_count(), rng), w = random_bf16(w_count, rng);
    std::vector<bf16> y(s.out_count()), ws(forward[0]);
    cpu::conv2d_forward_bf16(y.data(), x.data(), w.data(), static_cast<const bf16*>(nullptr), s, ws.data());
    std::vector<float> slow(s.out_count()), wsf(cpu::conv2d_forward_workspace(s));
    cpu::conv2d_forward<float>(slow.data(), widened(x).data(), widened(w).data(), nullptr, s, wsf.data());
    std::vector<float> magnitude(s.out_count());
    cpu::conv2d_forward<float>(magnitude.data(), magnitudes(widened(x)).data(), magnitudes(widened(w)).data(), nullptr,
                               s, wsf.data());
    expect_within_one_rounding(y, slow, magnitude, s, " sized without AMX");
  }
}

// Each output is one sequence of operations: a sample gives the same bits whatever the batch it runs in.
void expect_batch_independent(const cpu::Conv2dShape& s) {
  std::mt19937 rng(5);
  cpu::Conv2dShape one = s;
  one.n = 1;
  const std::size_t w_count = std::size_t(s.c_out) * (s.c_in / s.groups) * s.kh * s.kw;
  const auto x = random_bf16(s.in_count(), rng), w = random_bf16(w_count, rng);
  const auto b = random_bf16(s.c_out, rng);
  const std::vector<bf16> whole = run_fast(s, x, w, b.data(), false);
  const std::size_t x_len = one.in_count(), y_len = one.out_count();
  for (int i = 0; i < s.n; ++i) {
    const std::vector<bf16> xi(x.begin() + i * x_len, x.begin() + (i + 1) * x_len);
    const std::vector<bf16> yi = run_fast(one, xi, w, b.data(), false);
    for (std::size_t j = 0; j < y_len; ++j) ASSERT_EQ(yi[j].bits, whole[i * y_len + j].bits) << i << ", " << j;
  }
}

TEST(Conv2dBf16, SampleResultsDoNotDependOnTheBatch) {
  if (!cpu::has_bf16_dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  in_every_tile_path([] {
    expect_batch_independent(conv(11, 5, 12, 10, 3, 1, 1));
    expect_batch_independent(conv(11, 36, 9, 20, 3, 1, 1));
    expect_batch_independent(conv(11, 16, 9, 32, 3, 2, 1));
  });
}

// The stride-1 data gradient on vdpbf16ps against the widened float32 kernel, written (=) and added (+=)
// to a dx that holds values: the same tolerance as the forward's (one rounding of the output, float32
// sums in another order; with +=, dx's value joins the float32 sum before that one rounding).
void expect_data_paths_agree(const cpu::Conv2dShape& s, bool accumulate) {
  ASSERT_TRUE(cpu::conv2d_backward_data_bf16_direct(s));
  std::mt19937 rng(s.c_in * 17 + s.c_out * 5 + s.h + s.kh + accumulate);
  const std::size_t w_count = std::size_t(s.c_out) * (s.c_in / s.groups) * s.kh * s.kw;
  const auto dy = random_bf16(s.out_count(), rng), w = random_bf16(w_count, rng);
  const auto before = accumulate ? random_bf16(s.in_count(), rng) : std::vector<bf16>(s.in_count(), to_bf16(7.0f));
  std::vector<bf16> fast = before, ws(cpu::conv2d_backward_data_bf16_workspace(s));
  cpu::conv2d_backward_data_bf16(fast.data(), dy.data(), w.data(), s, ws.data(), accumulate);
  std::vector<float> slow = widened(before), wsf(cpu::conv2d_backward_data_workspace(s));
  cpu::conv2d_backward_data<float>(slow.data(), widened(dy).data(), widened(w).data(), s, wsf.data(), accumulate);
  std::vector<float> magnitude = magnitudes(widened(before));
  cpu::conv2d_backward_data<float>(magnitude.data(), magnitudes(widened(dy)).data(), magnitudes(widened(w)).data(), s,
                                   wsf.data(), accumulate);
  expect_within_one_rounding(fast, slow, magnitude, s, accumulate ? " dx +=" : " dx =");
}

TEST(Conv2dBf16, DataGradientMatchesTheWidenedFloat32Path) {
  if (!cpu::has_bf16_dot()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  in_every_tile_path([] {
    for (bool accumulate : {false, true}) {
      expect_data_paths_agree(conv(2, 3, 9, 5, 3, 1, 1), accumulate);
      expect_data_paths_agree(conv(3, 16, 8, 4, 3, 1, 1), accumulate);
      expect_data_paths_agree(conv(2, 6, 28, 6, 5, 1, 2), accumulate);
      expect_data_paths_agree(conv(2, 7, 12, 9, 3, 1, 0), accumulate);
      expect_data_paths_agree(conv(2, 12, 7, 8, 1, 1, 0), accumulate);
      expect_data_paths_agree(conv(2, 8, 10, 12, 3, 1, 1, 4), accumulate);
      expect_data_paths_agree(conv(2, 8, 10, 8, 3, 1, 1, 8), accumulate);
      expect_data_paths_agree(conv(9, 32, 14, 16, 3, 1, 1), accumulate);
      // On AMX: dy's 40 channels as 2 x 10 pairs, dx's 34 as 48 rows, grouped.
      expect_data_paths_agree(conv(2, 34, 9, 40, 3, 1, 1), accumulate);
      expect_data_paths_agree(conv(2, 64, 6, 64, 3, 1, 1, 2), accumulate);
      if (cpu::uses_amx()) {  // stride 2 through the phases; elsewhere widened
        expect_data_paths_agree(conv(2, 16, 11, 32, 3, 2, 1), accumulate);
        expect_data_paths_agree(conv(3, 20, 13, 24, 3, 2, 1), accumulate);
        expect_data_paths_agree(conv(2, 8, 12, 16, 5, 2, 2), accumulate);
        expect_data_paths_agree(conv(11, 16, 9, 32, 3, 2, 1), accumulate);  // chunks of 8 and 3
        expect_data_paths_agree(cpu::Conv2dShape{2, 16, 9, 11, 32, 1, 3, 2, 2, 0, 1, 5, 6, 1}, accumulate);
      }
    }
  });
  EXPECT_FALSE(cpu::conv2d_backward_data_bf16_direct(conv(2, 8, 10, 8, 3, 2, 1)));
  EXPECT_FALSE(cpu::conv2d_backward_data_bf16_direct(conv(2, 16, 10, 32, 3, 3, 1)));
  EXPECT_FALSE(cpu::conv2d_backward_data_bf16_direct(conv(2, 16, 10, 32, 1, 2, 0)));
}

// The weight gradient on AMX against the float32 kernel on the widened values: the products are exact
// in float32 either way, so they differ only in the order of the float32 sums (dw and db are float32).
struct WeightRun {
  std::vector<float> dw, db;
};
WeightRun weight_amx(const cpu::Conv2dShape& s, const std::vector<bf16>& dy, const std::vector<bf16>& x,
                     const WeightRun& before, bool accumulate) {
  WeightRun r = before;
  std::vector<bf16> ws(cpu::conv2d_backward_weight_amx_workspace(s));
  cpu::conv2d_backward_weight_amx(r.dw.data(), r.db.data(), dy.data(), x.data(), s, ws.data(), accumulate);
  return r;
}

void expect_weight_paths_agree(const cpu::Conv2dShape& s, bool accumulate) {
  ASSERT_TRUE(cpu::conv2d_backward_weight_amx_applies(s));
  std::mt19937 rng(s.c_in * 13 + s.c_out * 3 + s.h + s.kh + accumulate);
  const std::size_t w_count = std::size_t(s.c_out) * (s.c_in / s.groups) * s.kh * s.kw;
  const auto dy = random_bf16(s.out_count(), rng), x = random_bf16(s.in_count(), rng);
  WeightRun before{widened(random_bf16(w_count, rng)), widened(random_bf16(s.c_out, rng))};
  if (!accumulate) before = {std::vector<float>(w_count, 7.0f), std::vector<float>(s.c_out, 7.0f)};
  const WeightRun fast = weight_amx(s, dy, x, before, accumulate);
  WeightRun slow = before, magnitude{magnitudes(before.dw), magnitudes(before.db)};
  std::vector<float> wsf(cpu::conv2d_backward_weight_workspace(s));
  cpu::conv2d_backward_weight<float>(slow.dw.data(), slow.db.data(), widened(dy).data(), widened(x).data(), s,
                                     wsf.data(), accumulate);
  cpu::conv2d_backward_weight<float>(magnitude.dw.data(), magnitude.db.data(), magnitudes(widened(dy)).data(),
                                     magnitudes(widened(x)).data(), s, wsf.data(), accumulate);
  for (auto [got, want, mag, what] : {std::tuple{&fast.dw, &slow.dw, &magnitude.dw, "dw"},
                                      std::tuple{&fast.db, &slow.db, &magnitude.db, "db"}})
    for (std::size_t i = 0; i < got->size(); ++i)
      ASSERT_NEAR((*got)[i], (*want)[i], 1e-5 * (*mag)[i] + 1e-30)
          << what << " element " << i << " of c_in " << s.c_in << " c_out " << s.c_out << " k " << s.kh << " pad "
          << s.pad_h << " groups " << s.groups << (accumulate ? " +=" : " =");
}

TEST(Conv2dBf16, WeightGradientOnAmxMatchesTheFloat32Kernel) {
  if (!cpu::uses_amx()) GTEST_SKIP() << "this CPU (or its kernel) has no AMX-BF16";
  for (bool accumulate : {false, true}) {
    expect_weight_paths_agree(conv(2, 16, 9, 16, 3, 1, 1), accumulate);
    // Channels padded to whole tiles (34 as 48: an odd number of input blocks), 5x5, 1x1, no padding,
    // grouped, and more samples than a pass holds (40 of 7x7 maps: passes of 32 and 8).
    expect_weight_paths_agree(conv(3, 34, 7, 20, 3, 1, 1), accumulate);
    expect_weight_paths_agree(conv(2, 32, 6, 48, 5, 1, 2), accumulate);
    expect_weight_paths_agree(conv(2, 64, 5, 32, 1, 1, 0), accumulate);
    expect_weight_paths_agree(conv(2, 16, 10, 16, 3, 1, 0), accumulate);
    expect_weight_paths_agree(conv(2, 64, 6, 32, 3, 1, 1, 2), accumulate);
    expect_weight_paths_agree(conv(40, 16, 5, 16, 3, 1, 1), accumulate);
    // Stride 2 through the phases, in chunks of 8 samples (11: 8 and 3).
    expect_weight_paths_agree(conv(11, 16, 11, 32, 3, 2, 1), accumulate);
    expect_weight_paths_agree(conv(2, 8, 12, 16, 5, 2, 2), accumulate);
    // Groups whose channels need padding (34 inputs as 48, 20 outputs as 32), 33 inputs, a 1x3 stride-2 kernel.
    expect_weight_paths_agree(conv(2, 68, 6, 40, 3, 1, 1, 2), accumulate);
    expect_weight_paths_agree(conv(3, 33, 7, 16, 3, 1, 1), accumulate);
    expect_weight_paths_agree(cpu::Conv2dShape{2, 16, 9, 11, 32, 1, 3, 2, 2, 0, 1, 5, 6, 1}, accumulate);
  }
  EXPECT_FALSE(cpu::conv2d_backward_weight_amx_applies(conv(2, 16, 10, 16, 3, 3, 1)));
  EXPECT_FALSE(cpu::conv2d_backward_weight_amx_applies(conv(2, 16, 10, 32, 1, 2, 0)));
  EXPECT_FALSE(cpu::conv2d_backward_weight_amx_applies(conv(2, 8, 10, 16, 3, 1, 1)));
}

// Lean passes (one sample each, less workspace) and any thread count give the same bits, at stride 1 and
// through the phases at stride 2.
TEST(Conv2dBf16, WeightGradientOnAmxHasTheSameBitsLeanAndOnAnyThreads) {
  if (!cpu::uses_amx()) GTEST_SKIP() << "this CPU (or its kernel) has no AMX-BF16";
  for (const cpu::Conv2dShape& shape : {conv(24, 32, 12, 48, 3, 1, 1), conv(19, 16, 13, 32, 3, 2, 1)}) {
    std::mt19937 rng(9);
    cpu::Conv2dShape s = shape;
    const auto dy = random_bf16(s.out_count(), rng), x = random_bf16(s.in_count(), rng);
    const WeightRun zero{std::vector<float>(std::size_t(s.c_out) * s.c_in * s.kh * s.kw), std::vector<float>(s.c_out)};
    const WeightRun whole = weight_amx(s, dy, x, zero, false);
    s.lean = true;
    EXPECT_LT(cpu::conv2d_backward_weight_amx_workspace(s), cpu::conv2d_backward_weight_amx_workspace(shape));
    const int threads = omp_get_max_threads();
    for (int t : {1, 2, 3}) {
      omp_set_num_threads(t);
      const WeightRun lean = weight_amx(s, dy, x, zero, false);
      for (std::size_t i = 0; i < whole.dw.size(); ++i) ASSERT_EQ(lean.dw[i], whole.dw[i]) << i << " at threads " << t;
      for (std::size_t i = 0; i < whole.db.size(); ++i) ASSERT_EQ(lean.db[i], whole.db[i]) << i << " at threads " << t;
    }
    omp_set_num_threads(threads);
  }
}
}  // namespace
}  // namespace crumb
