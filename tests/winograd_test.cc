// The Winograd F(2x2, 3x3) convolution passes (kernels/cpu/conv2d_winograd.cc) against a double-precision
// direct convolution on the same (rounded) inputs, and against the default kernels. Winograd's transforms
// add before they multiply, so its error is bounded by the sums of |terms| rather than by the result: each
// output is checked within tol * (sum over its taps of |x| * |w| + 1), tol 1e-6 in float32 (errors measured
// under 2.5e-7 on these shapes, about 2 ulps of the |terms| sum) and 1e-14 in double. Its forward's
// independence of the batch is checked with the other paths' (CpuKernelTest in kernels_test.cc).
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/conv2d.h"
#include "tests/test_util.h"

namespace crumb::cpu {
namespace {

using test::random_doubles;
using Vec = std::vector<double>;

template <class T> double winograd_tolerance() { return std::is_same_v<T, float> ? 1e-6 : 1e-14; }

Conv2dShape shape3x3(int n, int c_in, int h, int w, int c_out, int pad_h, int pad_w) {
  return {n, c_in, h, w, c_out, 3, 3, 1, 1, pad_h, pad_w, h + 2 * pad_h - 2, w + 2 * pad_w - 2};
}

// Reference passes in double, with the sums of |terms| each output's rounding scales with.
struct Reference {
  Vec y, y_abs, dx, dx_abs;
};

Reference reference(const Conv2dShape& s, const Vec& x, const Vec& w, const Vec& b, const Vec& dy) {
  Reference r{Vec(s.out_count()), Vec(s.out_count()), Vec(s.in_count(), 0.0), Vec(s.in_count(), 0.0)};
  for (int i = 0; i < s.n; ++i)
    for (int co = 0; co < s.c_out; ++co)
      for (int oh = 0; oh < s.h_out; ++oh)
        for (int ow = 0; ow < s.w_out; ++ow) {
          const long yi = ((long(i) * s.c_out + co) * s.h_out + oh) * s.w_out + ow;
          r.y[yi] = b[co];
          r.y_abs[yi] = std::abs(b[co]);
          for (int ci = 0; ci < s.c_in; ++ci)
            for (int ki = 0; ki < 3; ++ki)
              for (int kj = 0; kj < 3; ++kj) {
                const int ih = oh - s.pad_h + ki, iw = ow - s.pad_w + kj;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                const long xi = ((long(i) * s.c_in + ci) * s.h + ih) * s.w + iw;
                const double wv = w[((long(co) * s.c_in + ci) * 3 + ki) * 3 + kj];
                r.y[yi] += x[xi] * wv;
                r.y_abs[yi] += std::abs(x[xi] * wv);
                r.dx[xi] += dy[yi] * wv;
                r.dx_abs[xi] += std::abs(dy[yi] * wv);
              }
        }
  return r;
}

template <class T> void expect_within(const std::vector<T>& got, const Vec& want, const Vec& scale, double tol,
                                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 5; ++i)
    if (!(std::abs(double(got[i]) - want[i]) <= tol * (scale[i] + 1))) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i] << " (|terms| " << scale[i] << ")";
      ++bad;
    }
}

template <class T> std::vector<T> cast(const Vec& v) { return std::vector<T>(v.begin(), v.end()); }
template <class T> Vec rounded(Vec v) {
  for (double& e : v) e = static_cast<T>(e);
  return v;
}

template <class T> class WinogradTest : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(WinogradTest, Types);

template <class T> void check(const Conv2dShape& s) {
  SCOPED_TRACE(::testing::Message() << "n=" << s.n << " c_in=" << s.c_in << " " << s.h << "x" << s.w
                                    << " c_out=" << s.c_out << " pad=" << s.pad_h << "," << s.pad_w);
  ASSERT_TRUE(conv2d_winograd_applies(s));
  const Vec x = rounded<T>(random_doubles(s.in_count(), 1)), w = rounded<T>(random_doubles(9L * s.c_in * s.c_out, 2));
  const Vec b = rounded<T>(random_doubles(s.c_out, 3)), dy = rounded<T>(random_doubles(s.out_count(), 4));
  const Reference ref = reference(s, x, w, b, dy);
  const auto tx = cast<T>(x), tw = cast<T>(w), tb = cast<T>(b), tdy = cast<T>(dy);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  // NaN-filled outputs and exactly sized workspaces: a read of stale contents or an overrun shows.
  std::vector<T> ws_f(winograd_forward_workspace(s), nan), ws_d(winograd_backward_data_workspace(s), nan);
  std::vector<T> y(s.out_count(), nan), dx(s.in_count(), nan);
  winograd_forward(y.data(), tx.data(), tw.data(), tb.data(), s, ws_f.data());
  expect_within(y, ref.y, ref.y_abs, winograd_tolerance<T>(), "y");
  winograd_backward_data(dx.data(), tdy.data(), tw.data(), s, ws_d.data(), false);
  expect_within(dx, ref.dx, ref.dx_abs, winograd_tolerance<T>(), "dx");
  // Accumulate: added onto what dx held.
  const Vec start = rounded<T>(random_doubles(s.in_count(), 5));
  std::vector<T> acc = cast<T>(start);
  Vec want = ref.dx, scale = ref.dx_abs;
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += start[i], scale[i] += std::abs(start[i]);
  winograd_backward_data(acc.data(), tdy.data(), tw.data(), s, ws_d.data(), true);
  expect_within(acc, want, scale, winograd_tolerance<T>(), "dx accumulated");
  // The default kernels on the same inputs agree within both errors.
  std::vector<T> y_direct(s.out_count()), ws(conv2d_forward_workspace(s));
  conv2d_forward(y_direct.data(), tx.data(), tw.data(), tb.data(), s, ws.data());
  expect_within(y, Vec(y_direct.begin(), y_direct.end()), ref.y_abs, 2 * winograd_tolerance<T>(), "y vs direct");
}

TYPED_TEST(WinogradTest, MatchesTheDirectConvolution) {
  for (const Conv2dShape& s : {
           shape3x3(2, 3, 8, 8, 4, 1, 1),      // even map: whole tiles
           shape3x3(3, 2, 7, 9, 5, 1, 1),      // odd sizes: the last tile row and column half outside
           shape3x3(2, 3, 9, 10, 2, 0, 0),     // no padding (dx: dy padded by 2)
           shape3x3(2, 2, 6, 5, 3, 2, 1),      // padding 2 (dx: dy unpadded), pads differ
           shape3x3(1, 4, 1, 1, 3, 1, 1),      // 1x1 map: one tile, mostly padding
           shape3x3(5, 16, 32, 32, 16, 1, 1),  // resnet20 layer1: tile rows of one sample per chunk
           shape3x3(9, 8, 4, 4, 12, 1, 1),     // small maps: several samples per chunk, a ragged chunk
           shape3x3(4, 96, 6, 6, 80, 1, 1),    // deep: the GEMMs' row tails (80 = 10 x 8)
       }) {
    check<TypeParam>(s);
  }
}

TEST(Winograd, AppliesToStrideOne3x3Only) {
  EXPECT_TRUE(conv2d_winograd_applies(shape3x3(1, 4, 8, 8, 4, 1, 1)));
  Conv2dShape strided = shape3x3(1, 4, 8, 8, 4, 1, 1);
  strided.stride_h = 2;
  EXPECT_FALSE(conv2d_winograd_applies(strided));
  Conv2dShape grouped = shape3x3(1, 4, 8, 8, 4, 1, 1);
  grouped.groups = 2;
  EXPECT_FALSE(conv2d_winograd_applies(grouped));
  EXPECT_FALSE(conv2d_winograd_applies(Conv2dShape{1, 4, 8, 8, 4, 5, 5, 1, 1, 2, 2, 8, 8}));
  EXPECT_FALSE(conv2d_winograd_applies(shape3x3(1, 4, 8, 8, 4, 3, 3)));  // pad 3: dx would need negative padding
}

}  // namespace
}  // namespace crumb::cpu
