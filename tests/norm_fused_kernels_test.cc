// The CPU normalisation kernels with their fused epilogues (kernels/norm.h) against the chains they replace,
// bit for bit, at shapes the model tests do not reach: long and short runs (a 28x28 map, 1 to 49 values,
// lengths that are no multiple of the 16 sum lanes), more channels than a block holds, ragged BatchNorm
// groups, GroupNorm's one-pass and two-pass paths; float, double and bf16; one thread and two. And the
// statistics and parameter gradients against the summation order kernels/cpu/norm.cc documents (value i
// of a run to lane i % 16, lanes carried from run to run in sample order, then added pairwise), written
// out here in scalar code: the kernels' blocking may change, their bits may not.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/norm.h"
#include "tests/test_util.h"

namespace crumb::cpu {
namespace {

template <class T> std::vector<T> values_of(std::size_t count, unsigned seed, double lo = -2, double hi = 2) {
  std::vector<T> out;
  for (double d : test::random_doubles(count, seed, lo, hi)) out.push_back(T(Arith<T>(d)));
  return out;
}
template <class T> std::vector<T> bf16_values(std::size_t count, unsigned seed) {
  std::vector<T> out;
  for (double d : test::random_doubles(count, seed, -2, 2)) out.push_back(from_float<T>(float(d)));
  return out;
}
template <class T> std::vector<T> activations(std::size_t count, unsigned seed) {
  if constexpr (std::is_same_v<T, bf16>) {
    return bf16_values<T>(count, seed);
  } else {
    return values_of<T>(count, seed);
  }
}

// A check's operands, `count` activations each (x, the residual r, the gradient dy) and the parameters w
// and b of `c` channels, from seeds seed, seed + 1, ...
template <class T> struct Operands {
  std::size_t count;
  std::vector<T> x, r, dy;
  std::vector<Arith<T>> w, b;
  Operands(std::size_t n, int c, unsigned seed)
      : count(n), x(activations<T>(n, seed)), r(activations<T>(n, seed + 1)), dy(activations<T>(n, seed + 2)),
        w(values_of<Arith<T>>(c, seed + 3, 0.5, 1.5)), b(values_of<Arith<T>>(c, seed + 4, -0.5, 0.5)) {}
};

std::string shape_name(const char* what, int n, int c, int hw, const char* last, int value) {
  return std::string(what) + " n=" + std::to_string(n) + " c=" + std::to_string(c) + " hw=" + std::to_string(hw) +
         " " + last + "=" + std::to_string(value);
}

template <class V> void expect_bits(const V& got, const V& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(0, std::memcmp(&got[i], &want[i], sizeof got[i])) << what << ": first difference at " << i;
}

// Keeps OpenMP's thread count as it found it.
struct ThreadCount {
  int before = omp_get_max_threads();
  ~ThreadCount() { omp_set_num_threads(before); }
};

// Runs f at one thread and at two.
template <class F> void at_thread_counts(F&& f) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE(std::to_string(threads) + " thread(s)");
    omp_set_num_threads(threads);
    f();
  }
}

// The documented order of the kernels' double sums.
struct RefLanes {
  double v[16] = {};
  void add(int i, double x) { v[i % 16] += x; }
  double total() const {
    double t[8];
    for (int k = 0; k < 8; ++k) t[k] = v[k] + v[k + 8];
    for (int w = 4; w >= 1; w /= 2)
      for (int k = 0; k < w; ++k) t[k] += t[k + w];
    return t[0];
  }
};

struct BnCase {
  int n, c, hw, group;
};
const BnCase kBnCases[] = {
    {20, 16, 784, 8},  // resnet20's first stage per channel, ragged last group of 4
    {9, 3, 49, 4},     // resnet20's last stage's map, 3 groups, ragged
    {8, 130, 1, 4},    // one-value maps, more channels than a block
    {6, 40, 5, 6},     // runs shorter than the lanes
    {5, 24, 23, 2},    // lengths with a tail past the lanes
    {64, 130, 5, 16},  // short runs, threaded, more channels than a block
};

template <class T> void check_batch_norm(const BnCase& k) {
  using A = Arith<T>;
  SCOPED_TRACE(shape_name("BatchNorm", k.n, k.c, k.hw, "group", k.group));
  const BatchNormShape s{k.n, k.c, k.hw, k.group};
  const Operands<T> o(std::size_t(k.n) * k.c * k.hw, k.c, 1);
  const std::size_t count = o.count, stats_size = 2 * std::size_t(s.groups()) * k.c;
  const std::vector<T>&x = o.x, &r = o.r, &dy = o.dy;
  const std::vector<A>&w = o.w, &b = o.b;
  const double eps = 1e-5;

  // The chain, at one thread: batch_norm, add, relu; relu_backward, batch_norm_backward.
  const ThreadCount keep;
  omp_set_num_threads(1);
  std::vector<T> z(count), zr(count), y(count), g(count), dx(count);
  std::vector<A> stats(stats_size), dw(k.c), db(k.c);
  std::vector<double> moments(3 * std::size_t(k.c));
  batch_norm_forward_train<T>(z.data(), stats.data(), x.data(), w.data(), b.data(), s, eps, moments.data(), nullptr,
                              nullptr, nullptr, 0.1);
  add_forward<T>(zr.data(), z.data(), r.data(), count);
  relu_forward<T>(y.data(), zr.data(), count);
  std::vector<T> y_plain(count);
  relu_forward<T>(y_plain.data(), z.data(), count);
  relu_backward<T>(g.data(), dy.data(), y.data(), count, false);
  batch_norm_backward<T>(dw.data(), db.data(), dx.data(), g.data(), x.data(), w.data(), stats.data(), s, true, false);
  std::vector<T> g_plain(count), dx_plain(count);
  std::vector<A> dw_plain(k.c), db_plain(k.c);
  relu_backward<T>(g_plain.data(), dy.data(), y_plain.data(), count, false);
  batch_norm_backward<T>(dw_plain.data(), db_plain.data(), dx_plain.data(), g_plain.data(), x.data(), w.data(),
                         stats.data(), s, true, false);

  // The statistics and parameter gradients in the documented order.
  if constexpr (std::is_same_v<T, float>) {
    const std::ptrdiff_t stride = std::ptrdiff_t{k.c} * k.hw;
    for (int c = 0; c < k.c; ++c) {
      double sdw = 0, sdb = 0;
      for (int grp = 0; grp < s.groups(); ++grp) {
        const int samples = s.group_size(grp);
        auto each = [&](auto&& f) {
          for (int r = 0; r < samples; ++r)
            for (int i = 0; i < k.hw; ++i) f(i, (grp * k.group + r) * stride + std::ptrdiff_t{c} * k.hw + i);
        };
        const double total = double(samples) * k.hw;
        RefLanes sum, m2, sg, sgx;
        each([&](int i, std::ptrdiff_t at) { sum.add(i, x[at]); });
        const double mean = sum.total() / total;
        each([&](int i, std::ptrdiff_t at) { m2.add(i, (x[at] - mean) * (x[at] - mean)); });
        ASSERT_EQ(stats[(2 * grp) * k.c + c], float(mean)) << "mean of channel " << c << ", group " << grp;
        ASSERT_EQ(stats[(2 * grp + 1) * k.c + c], float(1 / std::sqrt(m2.total() / total + eps)))
            << "invstd of channel " << c << ", group " << grp;
        const double m = stats[(2 * grp) * k.c + c];
        each([&](int i, std::ptrdiff_t at) { sg.add(i, g[at]), sgx.add(i, double(g[at]) * (x[at] - m)); });
        sdb += sg.total();
        sdw += sgx.total() * double(stats[(2 * grp + 1) * k.c + c]);
      }
      ASSERT_EQ(db[c], float(sdb)) << "db of channel " << c;
      ASSERT_EQ(dw[c], float(sdw)) << "dw of channel " << c;
    }
  }

  at_thread_counts([&] {
    for (bool residual : {true, false}) {
      SCOPED_TRACE(residual ? "with the residual" : "without a residual");
      const std::vector<T>& want_y = residual ? y : y_plain;
      std::vector<T> fy(count), ay(count);
      std::vector<A> fstats(stats_size);
      std::vector<double> fmoments(3 * std::size_t(k.c));
      const NormEpilogue<T> e{residual ? r.data() : nullptr, true};
      batch_norm_forward_train<T>(fy.data(), fstats.data(), x.data(), w.data(), b.data(), s, eps, fmoments.data(),
                                  nullptr, nullptr, nullptr, 0.1, e);
      expect_bits(fy, want_y, "fused forward");
      expect_bits(fstats, stats, "statistics");
      expect_bits(fmoments, moments, "moments");
      ay = x;  // in place, as a recomputation runs
      batch_norm_apply<T>(ay.data(), ay.data(), w.data(), b.data(), stats.data(), s, e);
      expect_bits(ay, want_y, "apply, in place");

      const std::vector<T>& want_g = residual ? g : g_plain;
      const std::vector<T>& want_dx = residual ? dx : dx_plain;
      const std::vector<A>& want_dw = residual ? dw : dw_plain;
      const std::vector<A>& want_db = residual ? db : db_plain;
      for (bool with_dx : {true, false}) {
        SCOPED_TRACE(with_dx ? "with dx" : "without dx");
        std::vector<T> fdx(count), fdr = dy;  // the residual's gradient in dy's storage, as the planner puts it
        std::vector<A> fdw(k.c), fdb(k.c);
        batch_norm_backward<T>(fdw.data(), fdb.data(), with_dx ? fdx.data() : nullptr, fdr.data(), x.data(), w.data(),
                               stats.data(), s, true, false, {want_y.data(), residual ? fdr.data() : nullptr});
        expect_bits(fdw, want_dw, "dw");
        expect_bits(fdb, want_db, "db");
        if (with_dx) expect_bits(fdx, want_dx, "dx");
        if (residual) expect_bits(fdr, want_g, "the residual's gradient");
      }
      if (!residual) {  // dx in dy's storage, as the planner may put it (kBatchNormReluBwd)
        std::vector<T> inplace = dy;
        std::vector<A> fdw(k.c), fdb(k.c);
        batch_norm_backward<T>(fdw.data(), fdb.data(), inplace.data(), inplace.data(), x.data(), w.data(), stats.data(),
                               s, true, false, {want_y.data(), nullptr});
        expect_bits(fdw, want_dw, "dw, dx over dy");
        expect_bits(fdb, want_db, "db, dx over dy");
        expect_bits(inplace, want_dx, "dx over dy");
      }
    }
  });

  // Frozen (running statistics) and accumulate mode: the same kernels' other paths.
  at_thread_counts([&] {
    const std::vector<A> rm = values_of<A>(k.c, 6, -0.5, 0.5), rv = values_of<A>(k.c, 7, 0.5, 2);
    std::vector<T> pz(count), pzr(count), py(count), fy(count);
    std::vector<A> pstats(stats_size), fstats(stats_size);
    batch_norm_forward_frozen<T>(pz.data(), pstats.data(), x.data(), w.data(), b.data(), rm.data(), rv.data(), s, eps);
    add_forward<T>(pzr.data(), pz.data(), r.data(), count);
    relu_forward<T>(py.data(), pzr.data(), count);
    batch_norm_forward_frozen<T>(fy.data(), fstats.data(), x.data(), w.data(), b.data(), rm.data(), rv.data(), s, eps,
                                 {r.data(), true});
    expect_bits(fy, py, "frozen fused forward");
    expect_bits(fstats, pstats, "frozen statistics");
    std::vector<A> pdw = w, pdb = b, fdw = w, fdb = b;
    std::vector<T> pg(count), pdx(count), fdx(count);
    relu_backward<T>(pg.data(), dy.data(), py.data(), count, false);
    batch_norm_backward<T>(pdw.data(), pdb.data(), pdx.data(), pg.data(), x.data(), w.data(), pstats.data(), s, false,
                           true);
    batch_norm_backward<T>(fdw.data(), fdb.data(), fdx.data(), dy.data(), x.data(), w.data(), pstats.data(), s, false,
                           true, {py.data(), nullptr});
    expect_bits(fdw, pdw, "frozen dw, accumulated");
    expect_bits(fdb, pdb, "frozen db, accumulated");
    expect_bits(fdx, pdx, "frozen dx");
  });
}

// f(T{}) for each storage type the checks run in.
template <class F> void for_types(F&& f) {
  f(float{});
  f(double{});
  f(bf16{});
}

TEST(NormFusedKernels, BatchNormEqualsTheChainBitForBit) {
  for (const BnCase& k : kBnCases) for_types([&](auto t) { check_batch_norm<decltype(t)>(k); });
}

struct GnCase {
  int n, c, hw, groups;
};
const GnCase kGnCases[] = {
    {6, 16, 784, 16},  // resnet20's first stage with GroupNorm, one channel per group
    {5, 64, 49, 32},   // two channels per group, short runs
    {4, 8, 4100, 1},   // one group: two threads take the two-pass path
    {2, 1040, 3, 1},   // more channels per group than a one-pass task holds
    {3, 12, 1, 4},     // one-value maps
};

template <class T> void check_group_norm(const GnCase& k) {
  using A = Arith<T>;
  SCOPED_TRACE(shape_name("GroupNorm", k.n, k.c, k.hw, "groups", k.groups));
  const GroupNormShape s{k.n, k.c, k.hw, k.groups};
  const Operands<T> o(std::size_t(k.n) * k.c * k.hw, k.c, 11);
  const std::size_t count = o.count;
  const std::vector<T>&x = o.x, &r = o.r, &dy = o.dy;
  const std::vector<A>& w = o.w;

  // The chain at one thread, as for BatchNorm.
  const ThreadCount keep;
  omp_set_num_threads(1);
  std::vector<T> z(count), zr(count), y(count), g(count), dx(count);
  std::vector<A> stats(2 * std::size_t(k.n) * k.groups), dw(k.c), db(k.c);
  group_norm_forward<T>(z.data(), stats.data(), x.data(), w.data(), o.b.data(), s, 1e-5);
  add_forward<T>(zr.data(), z.data(), r.data(), count);
  relu_forward<T>(y.data(), zr.data(), count);
  relu_backward<T>(g.data(), dy.data(), y.data(), count, false);
  group_norm_backward<T>(dw.data(), db.data(), dx.data(), g.data(), x.data(), w.data(), stats.data(), s, false);

  at_thread_counts([&] {
    std::vector<T> fy(count);
    std::vector<A> fstats(stats.size());
    group_norm_forward<T>(fy.data(), fstats.data(), x.data(), w.data(), o.b.data(), s, 1e-5, {r.data(), true});
    expect_bits(fy, y, "fused forward");
    expect_bits(fstats, stats, "statistics");
    for (bool residual : {true, false})
      for (bool with_dx : {true, false}) {
        SCOPED_TRACE(std::string(residual ? "with" : "without") + " the residual's gradient, " +
                     (with_dx ? "with" : "without") + " dx");
        std::vector<T> fdx(count), fdr = dy;
        std::vector<A> fdw = w, fdb = o.b, pdw = w, pdb = o.b;  // accumulate onto these
        group_norm_backward<T>(fdw.data(), fdb.data(), with_dx ? fdx.data() : nullptr, fdr.data(), x.data(), w.data(),
                               stats.data(), s, true, {y.data(), residual ? fdr.data() : nullptr});
        std::vector<T> pdx(count);
        group_norm_backward<T>(pdw.data(), pdb.data(), pdx.data(), g.data(), x.data(), w.data(), stats.data(), s, true);
        expect_bits(fdw, pdw, "dw, accumulated");
        expect_bits(fdb, pdb, "db, accumulated");
        if (with_dx) expect_bits(fdx, dx, "dx");
        if (residual) expect_bits(fdr, g, "the residual's gradient");
        std::vector<A> odw(k.c), odb(k.c);
        std::vector<T> odx(count);
        group_norm_backward<T>(odw.data(), odb.data(), odx.data(), g.data(), x.data(), w.data(), stats.data(), s, false);
        expect_bits(odw, dw, "plain dw");
        expect_bits(odb, db, "plain db");
        expect_bits(odx, dx, "plain dx");
      }
  });
}

TEST(NormFusedKernels, GroupNormEqualsTheChainBitForBit) {
  for (const GnCase& k : kGnCases) for_types([&](auto t) { check_group_norm<decltype(t)>(k); });
}

}  // namespace
}  // namespace crumb::cpu
