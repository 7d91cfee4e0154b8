// The CPU kernels' 16-bit instantiations (bf16, f16) against their float32 ones: each loads 16-bit values,
// computes in float32 and rounds its 16-bit outputs once, so it must give, bit for bit, what the float32
// kernel gives on the same values widened, rounded to 16 bits afterwards: what the widened row
// (engine/device/widen.h) computed before these kernels had 16-bit instantiations. Parameters,
// statistics, their gradients and probabilities stay float32 (Arith<T>) and must match exactly too (the
// double-precision moments up to the order of a vectorised sum). Accumulate mode adds onto 16-bit outputs
// that hold values already: there the compiler may fuse a product into the add (an FMA) in one
// instantiation and not the other, which moves a sum that cancels by a float32 rounding of its terms, so
// accumulated outputs match to one 16-bit rounding of the output's scale instead of bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/norm.h"
#include "kernels/pool.h"
#include "kernels/softmax_xent.h"
#include "tests/test_util.h"

namespace crumb::cpu {
namespace {

using Floats = std::vector<float>;

template <class H> std::vector<H> narrow(const Floats& v) {
  std::vector<H> out;
  for (float f : v) out.push_back(from_float<H>(f));
  return out;
}
template <class H> Floats widen(const std::vector<H>& v) {
  Floats out;
  for (H h : v) out.push_back(to_float(h));
  return out;
}
// count values in [lo, hi) that H holds exactly.
template <class H> Floats values(std::size_t count, unsigned seed, double lo = -2, double hi = 2) {
  Floats v;
  for (double d : test::random_doubles(count, seed, lo, hi)) v.push_back(to_float(from_float<H>(static_cast<float>(d))));
  return v;
}

template <class H>
void expect_bits(const std::vector<H>& got, const Floats& widened_result, const std::string& what, bool acc = false) {
  ASSERT_EQ(got.size(), widened_result.size()) << what;
  const std::vector<H> want = narrow<H>(widened_result);
  float scale = 0;
  for (H h : want) scale = std::max(scale, std::fabs(to_float(h)));
  const double u = std::is_same_v<H, bf16> ? 0x1p-8 : 0x1p-11;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (acc) {
      ASSERT_LE(std::fabs(to_float(got[i]) - to_float(want[i])), u * scale) << what << " (+=) at " << i;
      continue;
    }
    ASSERT_EQ(got[i].bits, want[i].bits) << what << " at " << i << ": " << to_float(got[i]) << " against "
                                         << to_float(want[i]);
  }
}
void expect_floats(const Floats& got, const Floats& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << what;
}

// One 16-bit output `out` and its float32 twin, starting from the same values (accumulate) or garbage.
template <class H> struct Out {
  Out(std::size_t count, bool accumulate, unsigned seed)
      : wide(accumulate ? values<H>(count, seed) : Floats(count, 1e30f)), half(narrow<H>(wide)) {}
  Floats wide;
  std::vector<H> half;
};

template <class H> class HalfKernels : public ::testing::Test {};
using HalfTypes = ::testing::Types<bf16, f16>;
TYPED_TEST_SUITE(HalfKernels, HalfTypes);

TYPED_TEST(HalfKernels, Elementwise) {
  using H = TypeParam;
  const std::size_t n = 40000;  // over kParallelGrain: the threaded loops
  const Floats x = values<H>(n, 1), y = values<H>(n, 2);
  const auto hx = narrow<H>(x), hy = narrow<H>(y);
  Out<H> relu(n, false, 0);
  relu_forward(relu.half.data(), hx.data(), n);
  relu_forward(relu.wide.data(), x.data(), n);
  expect_bits(relu.half, relu.wide, "relu_forward");
  Out<H> sum(n, false, 0);
  add_forward(sum.half.data(), hx.data(), hy.data(), n);
  add_forward(sum.wide.data(), x.data(), y.data(), n);
  expect_bits(sum.half, sum.wide, "add_forward");
  for (bool acc : {false, true}) {
    Out<H> dx(n, acc, 3), copy(n, acc, 4);
    relu_backward(dx.half.data(), hx.data(), hy.data(), n, acc);
    relu_backward(dx.wide.data(), x.data(), y.data(), n, acc);
    expect_bits(dx.half, dx.wide, "relu_backward", acc);
    copy_or_accumulate(copy.half.data(), hx.data(), n, acc);
    copy_or_accumulate(copy.wide.data(), x.data(), n, acc);
    expect_bits(copy.half, copy.wide, "copy_or_accumulate", acc);
  }
}

TYPED_TEST(HalfKernels, Dropout) {
  using H = TypeParam;
  const int n = 4;
  const std::size_t per = 5000;
  const Floats x = values<H>(n * per, 5);
  const auto hx = narrow<H>(x);
  for (bool acc : {false, true}) {
    Out<H> y(n * per, acc, 6);
    dropout(y.half.data(), hx.data(), n, per, RandomKey{17, 3}, 2, 0x60000000u, 1.6f, acc);
    dropout(y.wide.data(), x.data(), n, per, RandomKey{17, 3}, 2, 0x60000000u, 1.6f, acc);
    expect_bits(y.half, y.wide, "dropout", acc);
  }
}

TYPED_TEST(HalfKernels, Pooling) {
  using H = TypeParam;
  // 2x2 / 2 (its own path; on wide odd rows in several bands), overlapping 3x3 / 2 padded (the band
  // path), 3x3 / 1 over an odd map.
  const std::vector<Pool2dShape> shapes{{3, 4, 8, 8, 2, 2, 2, 2, 0, 0, 4, 4},
                                        {1, 2, 10, 1001, 2, 2, 2, 2, 0, 0, 5, 500},
                                        {2, 3, 9, 7, 3, 3, 2, 2, 1, 1, 5, 4},
                                        {2, 2, 5, 5, 3, 3, 1, 1, 0, 0, 3, 3}};
  for (const Pool2dShape& s : shapes) {
    SCOPED_TRACE(std::to_string(s.kh) + "x" + std::to_string(s.kw) + " stride " + std::to_string(s.stride_h));
    const std::size_t in = std::size_t(s.n) * s.c * s.h * s.w, out = std::size_t(s.n) * s.c * s.h_out * s.w_out;
    const Floats x = values<H>(in, 7), dy = values<H>(out, 8);
    const auto hx = narrow<H>(x), hdy = narrow<H>(dy);
    Out<H> y(out, false, 0);
    std::vector<uint8_t> at_half(out), at_wide(out);
    max_pool2d_forward(y.half.data(), at_half.data(), hx.data(), s);
    max_pool2d_forward(y.wide.data(), at_wide.data(), x.data(), s);
    expect_bits(y.half, y.wide, "max_pool2d_forward");
    EXPECT_EQ(at_half, at_wide) << "max_pool2d_forward argmax";
    Out<H> avg(out, false, 0);
    avg_pool2d_forward(avg.half.data(), hx.data(), s);
    avg_pool2d_forward(avg.wide.data(), x.data(), s);
    expect_bits(avg.half, avg.wide, "avg_pool2d_forward");
    const AdaptivePool2dShape a{s.n, s.c, s.h, s.w, s.h_out, s.w_out};
    Out<H> ada(out, false, 0);
    adaptive_avg_pool2d_forward(ada.half.data(), hx.data(), a);
    adaptive_avg_pool2d_forward(ada.wide.data(), x.data(), a);
    expect_bits(ada.half, ada.wide, "adaptive_avg_pool2d_forward");
    Out<H> gap(std::size_t(s.n) * s.c, false, 0);
    global_avg_pool_forward(gap.half.data(), hx.data(), s.n, s.c, s.h * s.w);
    global_avg_pool_forward(gap.wide.data(), x.data(), s.n, s.c, s.h * s.w);
    expect_bits(gap.half, gap.wide, "global_avg_pool_forward");
    for (bool acc : {false, true}) {
      // Overlapping windows add several gradients into one cell: the 16-bit kernel rounds after each
      // add, as the float32 kernel on a widened copy does not; only non-overlapping windows are exact.
      const bool overlap = s.kh > s.stride_h;
      Out<H> dmax(in, acc, 9), davg(in, acc, 10), dada(in, acc, 11), dgap(in, acc, 12);
      max_pool2d_backward(dmax.half.data(), hdy.data(), at_wide.data(), s, acc);
      max_pool2d_backward(dmax.wide.data(), dy.data(), at_wide.data(), s, acc);
      if (!overlap) expect_bits(dmax.half, dmax.wide, "max_pool2d_backward", acc);
      avg_pool2d_backward(davg.half.data(), hdy.data(), s, acc);
      avg_pool2d_backward(davg.wide.data(), dy.data(), s, acc);
      if (!overlap) expect_bits(davg.half, davg.wide, "avg_pool2d_backward", acc);
      adaptive_avg_pool2d_backward(dada.half.data(), hdy.data(), a, acc);
      adaptive_avg_pool2d_backward(dada.wide.data(), dy.data(), a, acc);
      expect_bits(dada.half, dada.wide, "adaptive_avg_pool2d_backward", acc);
      const Floats g = values<H>(std::size_t(s.n) * s.c, 13);
      global_avg_pool_backward(dgap.half.data(), narrow<H>(g).data(), s.n, s.c, s.h * s.w, acc);
      global_avg_pool_backward(dgap.wide.data(), g.data(), s.n, s.c, s.h * s.w, acc);
      expect_bits(dgap.half, dgap.wide, "global_avg_pool_backward", acc);
    }
  }
}

TYPED_TEST(HalfKernels, Norm) {
  using H = TypeParam;
  const BatchNormShape bn{6, 5, 36, 4};  // a ragged last group
  const GroupNormShape gn{3, 6, 20, 3};
  const std::size_t bn_count = std::size_t(bn.n) * bn.c * bn.hw, gn_count = std::size_t(gn.n) * gn.c * gn.hw;
  const Floats w = values<float>(8, 20, 0.5, 1.5), b = values<float>(8, 21);
  {
    const Floats x = values<H>(bn_count, 22), dy = values<H>(bn_count, 23);
    const auto hx = narrow<H>(x), hdy = narrow<H>(dy);
    Out<H> y(bn_count, false, 0);
    const std::size_t stats_count = std::size_t(2) * bn.groups() * bn.c;
    Floats stats_h(stats_count), stats_w(stats_count), rm_h(bn.c, 0.f), rv_h(bn.c, 1.f), rm_w = rm_h, rv_w = rv_h;
    std::vector<double> mom_h(3 * bn.c, 0.0), mom_w = mom_h;
    int64_t tracked_h = 0, tracked_w = 0;
    batch_norm_forward_train(y.half.data(), stats_h.data(), hx.data(), w.data(), b.data(), bn, 1e-5, mom_h.data(),
                             rm_h.data(), rv_h.data(), &tracked_h, 0.1);
    batch_norm_forward_train(y.wide.data(), stats_w.data(), x.data(), w.data(), b.data(), bn, 1e-5, mom_w.data(),
                             rm_w.data(), rv_w.data(), &tracked_w, 0.1);
    expect_bits(y.half, y.wide, "batch_norm_forward_train y");
    expect_floats(stats_h, stats_w, "batch_norm_forward_train stats");
    expect_floats(rm_h, rm_w, "batch_norm_forward_train running mean");
    for (std::size_t i = 0; i < mom_h.size(); ++i)
      EXPECT_NEAR(mom_h[i], mom_w[i], 1e-12 * std::fabs(mom_w[i])) << "batch_norm_forward_train moments " << i;
    Out<H> again(bn_count, false, 0);
    batch_norm_apply(again.half.data(), hx.data(), w.data(), b.data(), stats_h.data(), bn);
    EXPECT_EQ(0, std::memcmp(again.half.data(), y.half.data(), bn_count * sizeof(H))) << "batch_norm_apply";
    Out<H> frozen(bn_count, false, 0);
    batch_norm_forward_frozen(frozen.half.data(), stats_h.data(), hx.data(), w.data(), b.data(), rm_h.data(),
                              rv_h.data(), bn, 1e-5);
    batch_norm_forward_frozen(frozen.wide.data(), stats_w.data(), x.data(), w.data(), b.data(), rm_w.data(),
                              rv_w.data(), bn, 1e-5);
    expect_bits(frozen.half, frozen.wide, "batch_norm_forward_frozen");
    for (bool acc : {false, true}) {
      Floats dw_h = values<float>(bn.c, 24), db_h = values<float>(bn.c, 25), dw_w = dw_h, db_w = db_h;
      Out<H> dx(bn_count, false, 0);
      batch_norm_backward(dw_h.data(), db_h.data(), dx.half.data(), hdy.data(), hx.data(), w.data(), stats_w.data(),
                          bn, true, acc);
      batch_norm_backward(dw_w.data(), db_w.data(), dx.wide.data(), dy.data(), x.data(), w.data(), stats_w.data(), bn,
                          true, acc);
      expect_bits(dx.half, dx.wide, "batch_norm_backward dx");
      expect_floats(dw_h, dw_w, "batch_norm_backward dw");
      expect_floats(db_h, db_w, "batch_norm_backward db");
    }
  }
  {
    const Floats x = values<H>(gn_count, 26), dy = values<H>(gn_count, 27);
    const auto hx = narrow<H>(x), hdy = narrow<H>(dy);
    Out<H> y(gn_count, false, 0);
    Floats stats_h(std::size_t(2) * gn.n * gn.groups), stats_w = stats_h;
    group_norm_forward(y.half.data(), stats_h.data(), hx.data(), w.data(), b.data(), gn, 1e-5);
    group_norm_forward(y.wide.data(), stats_w.data(), x.data(), w.data(), b.data(), gn, 1e-5);
    expect_bits(y.half, y.wide, "group_norm_forward y");
    expect_floats(stats_h, stats_w, "group_norm_forward stats");
    for (bool acc : {false, true}) {
      Floats dw_h = values<float>(gn.c, 28), db_h = values<float>(gn.c, 29), dw_w = dw_h, db_w = db_h;
      Out<H> dx(gn_count, false, 0);
      group_norm_backward(dw_h.data(), db_h.data(), dx.half.data(), hdy.data(), hx.data(), w.data(), stats_w.data(), gn,
                          acc);
      group_norm_backward(dw_w.data(), db_w.data(), dx.wide.data(), dy.data(), x.data(), w.data(), stats_w.data(), gn,
                          acc);
      expect_bits(dx.half, dx.wide, "group_norm_backward dx");
      expect_floats(dw_h, dw_w, "group_norm_backward dw");
      expect_floats(db_h, db_w, "group_norm_backward db");
    }
  }
}

TYPED_TEST(HalfKernels, SoftmaxCrossEntropy) {
  using H = TypeParam;
  const int n = 7, k = 10;
  const Floats z = values<H>(std::size_t(n) * k, 30, -8, 8);
  const std::vector<int32_t> labels{0, 3, 9, 9, 1, 5, 2};
  Floats probs_h(z.size()), probs_w(z.size());
  const double loss_h = softmax_xent_forward(probs_h.data(), narrow<H>(z).data(), labels.data(), n, k);
  const double loss_w = softmax_xent_forward(probs_w.data(), z.data(), labels.data(), n, k);
  EXPECT_EQ(loss_h, loss_w);
  expect_floats(probs_h, probs_w, "softmax_xent_forward probs");
  for (bool acc : {false, true}) {
    Out<H> d(z.size(), acc, 31);
    softmax_xent_backward(d.half.data(), probs_w.data(), labels.data(), n, k, 0.125f, acc);
    softmax_xent_backward(d.wide.data(), probs_w.data(), labels.data(), n, k, 0.125f, acc);
    expect_bits(d.half, d.wide, "softmax_xent_backward", acc);
  }
}

}  // namespace
}  // namespace crumb::cpu
