// CPU kernels against naive double-precision reference loops. Inputs are drawn in double, rounded to
// the kernel's T, and the reference runs on the rounded values, so only the kernel's own arithmetic
// is measured: float within a relative tolerance, double tightly.
#include <omp.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/conv2d.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/pool.h"
#include "kernels/sgd.h"
#include "kernels/softmax_xent.h"
#include "tests/test_util.h"

namespace crumb::cpu {
namespace {

using test::random_doubles;
using Vec = std::vector<double>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Few distinct values, so max-pool windows and argmax rows contain ties.
Vec tied_vec(std::size_t count, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(0, 2);
  Vec v(count);
  for (double& e : v) e = dist(gen);
  return v;
}

template <class T> std::vector<T> cast(const Vec& v) { return std::vector<T>(v.begin(), v.end()); }
template <class T> Vec widen(const std::vector<T>& v) { return Vec(v.begin(), v.end()); }
// Rounds v to T in place, so the reference sees exactly the kernel's inputs.
template <class T> Vec& round_to(Vec& v) {
  for (double& e : v) e = static_cast<T>(e);
  return v;
}

template <class T> double tolerance() { return std::is_same_v<T, float> ? 3e-5 : 1e-12; }

template <class T> void expect_close(const std::vector<T>& got, const Vec& want, const std::string& what) {
  test::expect_close(got, want, tolerance<T>(), what);
}

// Runs a kernel with outputs pre-filled for each write mode and checks them against `want`: with
// accumulate=false the outputs start as NaN, so any read of the old contents shows; with
// accumulate=true they start random and `want` must be added on top.
template <class T>
void check_outputs(const std::vector<Vec>& want, bool has_accumulate,
                   const std::function<void(const std::vector<T*>&, bool)>& run) {
  for (bool accumulate : {false, true}) {
    if (accumulate && !has_accumulate) break;
    std::vector<std::vector<T>> outs;
    std::vector<T*> ptrs;
    for (std::size_t o = 0; o < want.size(); ++o) {
      Vec init = accumulate ? random_doubles(want[o].size(), 100 + o) : Vec(want[o].size(), kNaN);
      outs.push_back(cast<T>(init));
    }
    std::vector<Vec> expected = want;
    for (std::size_t o = 0; o < want.size(); ++o) {
      ptrs.push_back(outs[o].data());
      if (accumulate) {
        for (std::size_t i = 0; i < want[o].size(); ++i) expected[o][i] += outs[o][i];
      }
    }
    run(ptrs, accumulate);
    for (std::size_t o = 0; o < want.size(); ++o) {
      expect_close(outs[o], expected[o], "output " + std::to_string(o) + (accumulate ? " (+=)" : " (=)"));
    }
  }
}

template <class T> class CpuKernelTest : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CpuKernelTest, Types);

// ---- linear

TYPED_TEST(CpuKernelTest, Linear) {
  using T = TypeParam;
  // The last two are big enough to be split across threads and tiled along every GEMM dimension, the
  // last one's depth cut into pieces by ordered_gemm's L2 blocking.
  for (auto [n, in, out] : {std::tuple{3, 5, 4}, {1, 1, 1}, {7, 33, 19}, {64, 120, 84}, {8, 700, 300}, {520, 300, 200}}) {
    Vec x = random_doubles(n * in, 1), w = random_doubles(out * in, 2), b = random_doubles(out, 3);
    Vec dy = random_doubles(n * out, 4);
    round_to<T>(x), round_to<T>(w), round_to<T>(b), round_to<T>(dy);
    Vec y(n * out), y_nobias(n * out), dx(n * in, 0.0), dw(out * in, 0.0), db(out, 0.0);
    for (int i = 0; i < n; ++i) {
      for (int o = 0; o < out; ++o) {
        for (int k = 0; k < in; ++k) {
          y_nobias[i * out + o] += x[i * in + k] * w[o * in + k];
          dx[i * in + k] += dy[i * out + o] * w[o * in + k];
          dw[o * in + k] += dy[i * out + o] * x[i * in + k];
        }
        y[i * out + o] = y_nobias[i * out + o] + b[o];
        db[o] += dy[i * out + o];
      }
    }
    const auto tx = cast<T>(x), tw = cast<T>(w), tb = cast<T>(b), tdy = cast<T>(dy);
    std::vector<T> ws(linear_forward_workspace(n, in, out)), wsd(linear_backward_data_workspace(in, out));
    check_outputs<T>({y}, false,
                     [&](auto& o, bool) { linear_forward(o[0], tx.data(), tw.data(), tb.data(), n, in, out, ws.data()); });
    check_outputs<T>({y_nobias}, false, [&](auto& o, bool) {
      linear_forward(o[0], tx.data(), tw.data(), (const T*)nullptr, n, in, out, ws.data());
    });
    check_outputs<T>({dx}, true,
                     [&](auto& o, bool acc) { linear_backward_data(o[0], tdy.data(), tw.data(), n, in, out, wsd.data(), acc); });
    check_outputs<T>({dw, db}, true, [&](auto& o, bool acc) {
      linear_backward_weight(o[0], o[1], tdy.data(), tx.data(), n, in, out, acc);
    });
    check_outputs<T>({dw}, true, [&](auto& o, bool acc) {
      linear_backward_weight(o[0], (T*)nullptr, tdy.data(), tx.data(), n, in, out, acc);
    });
  }
}

// A large weight's data gradient goes through the workspace a chunk of panels at a time: the workspace stays
// a bounded fraction of the weight (VGG's classifier: not a second 392 MiB), and the chunks give the result.
TYPED_TEST(CpuKernelTest, LinearDataGradientInChunks) {
  using T = TypeParam;
  // In float elements (a count for any T: float64 graphs, the gradient checks', take twice the bytes).
  EXPECT_LE(linear_backward_data_workspace(25088, 4096) * sizeof(float), std::size_t{17} << 20);
  const int n = 2, in = 4500, out = 2048;
  ASSERT_LT(linear_backward_data_workspace(in, out), std::size_t(in) * out / 2) << "one chunk: the test covers none";
  Vec w = random_doubles(std::size_t(out) * in, 2), dy = random_doubles(n * out, 4);
  round_to<T>(w), round_to<T>(dy);
  Vec dx(std::size_t(n) * in, 0.0);
  for (int i = 0; i < n; ++i)
    for (int o = 0; o < out; ++o)
      for (int k = 0; k < in; ++k) dx[i * in + k] += dy[i * out + o] * w[std::size_t(o) * in + k];
  const auto tw = cast<T>(w), tdy = cast<T>(dy);
  std::vector<T> wsd(linear_backward_data_workspace(in, out));
  check_outputs<T>({dx}, true,
                   [&](auto& o, bool acc) { linear_backward_data(o[0], tdy.data(), tw.data(), n, in, out, wsd.data(), acc); });
}

// ---- conv2d

Conv2dShape conv_shape(int n, int c_in, int h, int w, int c_out, int kh, int kw, int sh, int sw, int ph, int pw) {
  return {n, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, (h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1};
}

// f(y_index, x_index, w_index, c_out) for every tap of the convolution that lands inside the image.
void for_each_tap(const Conv2dShape& s, const std::function<void(long, long, long, int)>& f) {
  for (int i = 0; i < s.n; ++i)
    for (int co = 0; co < s.c_out; ++co)
      for (int oh = 0; oh < s.h_out; ++oh)
        for (int ow = 0; ow < s.w_out; ++ow)
          for (int cg = 0; cg < s.c_in / s.groups; ++cg)  // input channel cg of co's group
            for (int ki = 0; ki < s.kh; ++ki)
              for (int kj = 0; kj < s.kw; ++kj) {
                const int ih = oh * s.stride_h - s.pad_h + ki, iw = ow * s.stride_w - s.pad_w + kj;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                const int ci = co / (s.c_out / s.groups) * (s.c_in / s.groups) + cg;
                f(((long(i) * s.c_out + co) * s.h_out + oh) * s.w_out + ow, ((long(i) * s.c_in + ci) * s.h + ih) * s.w + iw,
                  ((long(co) * (s.c_in / s.groups) + cg) * s.kh + ki) * s.kw + kj, co);
              }
}

template <class T> void check_conv(const Conv2dShape& s) {
  SCOPED_TRACE(::testing::Message() << "conv n=" << s.n << " c_in=" << s.c_in << " " << s.h << "x" << s.w
                                    << " c_out=" << s.c_out << " k=" << s.kh << "x" << s.kw << " stride=" << s.stride_h
                                    << "," << s.stride_w << " pad=" << s.pad_h << "," << s.pad_w
                                    << " groups=" << s.groups);
  const long w_count = long(s.c_out) * (s.c_in / s.groups) * s.kh * s.kw;
  Vec x = random_doubles(s.in_count(), 1), w = random_doubles(w_count, 2), b = random_doubles(s.c_out, 3);
  Vec dy = random_doubles(s.out_count(), 4);
  round_to<T>(x), round_to<T>(w), round_to<T>(b), round_to<T>(dy);
  Vec y(s.out_count()), dx(s.in_count(), 0.0), dw(w_count, 0.0), db(s.c_out, 0.0);
  const long hw = long(s.h_out) * s.w_out;
  for (long yi = 0; yi < s.out_count(); ++yi) y[yi] = b[(yi / hw) % s.c_out];
  for_each_tap(s, [&](long yi, long xi, long wi, int co) {
    y[yi] += x[xi] * w[wi];
    dx[xi] += dy[yi] * w[wi];
    dw[wi] += dy[yi] * x[xi];
    (void)co;
  });
  for (long yi = 0; yi < s.out_count(); ++yi) db[(yi / hw) % s.c_out] += dy[yi];

  const auto tx = cast<T>(x), tw = cast<T>(w), tb = cast<T>(b), tdy = cast<T>(dy);
  // Workspaces are exactly sized and NaN-filled: reading stale scratch or overrunning it shows.
  auto workspace = [](std::size_t n) { return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN()); };
  auto ws_f = workspace(conv2d_forward_workspace(s));
  auto ws_d = workspace(conv2d_backward_data_workspace(s));
  auto ws_w = workspace(conv2d_backward_weight_workspace(s));
  check_outputs<T>({y}, false,
                   [&](auto& o, bool) { conv2d_forward(o[0], tx.data(), tw.data(), tb.data(), s, ws_f.data()); });
  check_outputs<T>({dx}, true, [&](auto& o, bool acc) {
    conv2d_backward_data(o[0], tdy.data(), tw.data(), s, ws_d.data(), acc);
  });
  check_outputs<T>({dw, db}, true, [&](auto& o, bool acc) {
    conv2d_backward_weight(o[0], o[1], tdy.data(), tx.data(), s, ws_w.data(), acc);
  });
  check_outputs<T>({dw}, true, [&](auto& o, bool acc) {
    conv2d_backward_weight(o[0], (T*)nullptr, tdy.data(), tx.data(), s, ws_w.data(), acc);
  });
}

TYPED_TEST(CpuKernelTest, Conv2d) {
  for (const Conv2dShape& s : {
           conv_shape(3, 2, 7, 6, 4, 3, 3, 2, 2, 1, 1),     // odd sizes, stride 2, pad 1
           conv_shape(2, 3, 6, 7, 5, 2, 3, 1, 2, 0, 1),     // non-square kernel, mixed stride / pad
           conv_shape(2, 2, 8, 7, 3, 2, 2, 3, 3, 0, 0),     // stride > kernel: inputs skipped
           conv_shape(4, 1, 9, 9, 6, 5, 5, 1, 1, 2, 2),     // LeNet-like
           conv_shape(3, 4, 5, 5, 3, 1, 1, 1, 1, 0, 0),     // pointwise: no im2col
           conv_shape(2, 3, 5, 4, 2, 1, 1, 2, 2, 0, 0),     // 1x1 but strided
           conv_shape(10, 3, 12, 11, 8, 3, 3, 1, 1, 1, 1),  // big enough to split across threads
           conv_shape(12, 6, 9, 9, 7, 1, 1, 1, 1, 0, 0),    // pointwise, split across threads
           conv_shape(3, 3, 9, 8, 12, 3, 3, 1, 1, 1, 1),    // more output channels: GEMM, not GEMV
           conv_shape(2, 8, 10, 10, 12, 5, 5, 1, 1, 2, 2),  // deep enough to tile the GEMM depth
           // Direct (implicit-GEMM) convolutions, conv2d_direct.h: stride 1, at least 7x7 outputs.
           conv_shape(3, 2, 9, 10, 5, 3, 3, 1, 1, 0, 0),    // no padding: dy padded by 2 for dx
           conv_shape(2, 3, 10, 12, 7, 3, 5, 1, 1, 1, 2),   // kh != kw, pads differ
           conv_shape(2, 3, 8, 9, 5, 2, 4, 1, 1, 1, 0),     // even kernel, pad on one axis only
           conv_shape(70, 2, 9, 9, 3, 3, 3, 1, 1, 1, 1),    // 9x9: weight-gradient chunks plus a ragged one
           // Strided direct convolutions: phase planes (the data gradient stays with im2col).
           conv_shape(3, 3, 23, 24, 5, 3, 3, 2, 2, 1, 1),   // 3x3 stride 2, odd input height
           conv_shape(2, 2, 36, 34, 3, 2, 2, 3, 3, 0, 0),   // stride > kernel: phases never read
           conv_shape(2, 3, 12, 22, 4, 3, 3, 1, 2, 1, 1),   // strides differ
           conv_shape(2, 4, 14, 15, 6, 1, 1, 2, 2, 0, 0),   // 1x1 stride 2 (a ResNet downsample): im2col
           // Pointwise with depth enough for ordered_gemm's L2 blocking to cut it into pieces.
           conv_shape(2, 260, 12, 12, 300, 1, 1, 1, 1, 0, 0),  // 144 pixels: one GEMM per sample
           conv_shape(3, 260, 8, 8, 300, 1, 1, 1, 1, 0, 0),    // 64 pixels: blocks of samples
           conv_shape(2, 1, 28, 28, 8, 7, 7, 2, 2, 3, 3),   // a ResNet stem: 7x7 stride 2 pad 3
           // Small maps, conv2d_small.h: one GEMM per output pixel over the taps inside the image.
           conv_shape(140, 3, 4, 4, 5, 3, 3, 1, 1, 1, 1),   // 4x4: chunks of 64 samples plus a ragged one
           conv_shape(3, 2, 2, 2, 3, 1, 1, 1, 1, 1, 1),     // 1x1 kernel, pad 1: border outputs see no input
           conv_shape(4, 5, 1, 1, 6, 3, 3, 1, 1, 1, 1),     // 3x3 on 1x1: the centre tap alone
           // Enough work for a slice per thread: the slices' live-tap sums added up before dw is written.
           conv_shape(40, 64, 1, 1, 64, 3, 3, 1, 1, 1, 1),  // 3x3 on 1x1: one live tap of 9
           conv_shape(40, 64, 2, 2, 64, 3, 3, 2, 2, 1, 1),  // 2x2 stride 2 down to 1x1: four live taps
           conv_shape(40, 32, 2, 2, 48, 3, 3, 1, 1, 1, 1),  // 3x3 on 2x2: every tap live
           // 7x7 backward passes: small in slices of 32 samples or more, else direct / im2col.
           conv_shape(140, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1),   // 70 a slice on 2 threads: chunks + a ragged one
           conv_shape(63, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1),    // 31 and 32 on 2 threads: both ways in one call
           conv_shape(66, 2, 13, 14, 5, 3, 3, 2, 2, 1, 1),  // strided down to 7x7
           conv_shape(2, 96, 7, 7, 96, 3, 3, 1, 1, 1, 1),   // weights past cache size: direct
           // Forward of same-size maps past 4x4: pixel ranges over the interior, then the border.
           conv_shape(5, 2, 6, 7, 3, 3, 5, 1, 1, 1, 2),     // 3x5 kernel keeping a 6x7 map
           conv_shape(3, 2, 3, 6, 3, 5, 5, 1, 1, 2, 2),     // 5x5 on 3x6: no interior at all
           conv_shape(130, 3, 7, 7, 2, 5, 5, 1, 1, 2, 2),   // 5x5 on 7x7, 65 a slice: chunks of 64 + 1
           conv_shape(3, 4, 7, 7, 5, 1, 1, 1, 1, 0, 0),     // 1x1 on 7x7: not small (plain GEMM)
       }) {
    check_conv<TypeParam>(s);
  }
}

Conv2dShape grouped(Conv2dShape s, int groups) {
  s.groups = groups;
  return s;
}

// Grouped convolutions against the same definition, each input channel reaching its group's outputs only.
TYPED_TEST(CpuKernelTest, Conv2dGrouped) {
  for (const Conv2dShape& s : {
           grouped(conv_shape(3, 4, 7, 6, 6, 3, 3, 1, 1, 1, 1), 2),     // two groups: the ungrouped kernels
           grouped(conv_shape(2, 6, 6, 7, 9, 2, 3, 1, 2, 0, 1), 3),     // non-square kernel, mixed stride / pad
           grouped(conv_shape(20, 8, 4, 4, 8, 3, 3, 1, 1, 1, 1), 2),    // small maps, blocked samples
           grouped(conv_shape(3, 5, 7, 6, 5, 3, 3, 1, 1, 1, 1), 5),     // depthwise
           grouped(conv_shape(2, 3, 9, 8, 6, 3, 5, 2, 1, 1, 2), 3),     // depthwise x2, kh != kw, strides differ
           grouped(conv_shape(2, 2, 8, 7, 2, 2, 2, 3, 3, 0, 0), 2),     // depthwise, stride > kernel
           grouped(conv_shape(2, 3, 2, 3, 3, 5, 5, 1, 1, 2, 2), 3),     // depthwise, kernel past the map
           grouped(conv_shape(8, 32, 24, 24, 32, 3, 3, 1, 1, 1, 1), 32),  // depthwise, split across threads
           grouped(conv_shape(4, 960, 2, 2, 960, 3, 3, 1, 1, 1, 1), 960),  // MobileNetV2 on 48x48: features.17
       }) {
    check_conv<TypeParam>(s);
  }
}

// Results must not depend on the thread count, including uneven splits of the batch.
TYPED_TEST(CpuKernelTest, Conv2dThreeThreads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  check_conv<TypeParam>(conv_shape(11, 3, 12, 11, 8, 3, 3, 1, 1, 1, 1));
  check_conv<TypeParam>(conv_shape(41, 64, 2, 2, 64, 3, 3, 2, 2, 1, 1));  // small map: uneven live-tap slices
  check_conv<TypeParam>(conv_shape(40, 32, 2, 2, 48, 3, 3, 1, 1, 1, 1));  // small map, every tap live
  omp_set_num_threads(saved);
}

// A sample's forward output must not depend on the samples it is computed with (the micro-batch size,
// the thread split, the blocks small maps are grouped into): bitwise, since a ReLU kink turns a last-bit
// difference into a different gradient. Each sample alone, at 1-3 threads, equals the whole batch; the
// Winograd forward (conv2d_winograd.cc) as well where it applies.
TYPED_TEST(CpuKernelTest, Conv2dForwardIsBitwiseIndependentOfTheBatch) {
  using T = TypeParam;
  const int saved = omp_get_max_threads();
  for (const Conv2dShape& s : {
           conv_shape(13, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1),  // 64 pixels: blocks of 2, a ragged one
           conv_shape(11, 32, 4, 4, 64, 3, 3, 2, 2, 1, 1),  // strided down to 2x2: blocks of 32 > n
           conv_shape(9, 24, 7, 7, 20, 1, 1, 1, 1, 0, 0),   // pointwise on 7x7, rows not a tile multiple
           conv_shape(7, 64, 1, 1, 72, 3, 3, 1, 1, 1, 1),   // 3x3 on 1x1: only the centre tap
           conv_shape(70, 8, 7, 7, 12, 3, 3, 1, 1, 1, 1),   // 3x3 on 7x7: pixel ranges x chunks of samples
           conv_shape(5, 8, 30, 30, 8, 3, 3, 1, 1, 1, 1),   // Winograd: tile rows of one sample per chunk
       })
    for (bool winograd : {false, true}) {
      if (winograd && !conv2d_winograd_applies(s)) continue;
      SCOPED_TRACE(::testing::Message() << "n=" << s.n << " c_in=" << s.c_in << " " << s.h << "x" << s.w
                                        << (winograd ? " winograd" : ""));
      const auto x = cast<T>(random_doubles(s.in_count(), 1));
      const auto w = cast<T>(random_doubles(long(s.c_out) * s.c_in * s.kh * s.kw, 2));
      const auto b = cast<T>(random_doubles(s.c_out, 3));
      auto forward = [&](const Conv2dShape& shape, const T* xs) {
        std::vector<T> y(shape.out_count());
        std::vector<T> ws(winograd ? winograd_forward_workspace(shape) : conv2d_forward_workspace(shape));
        if (winograd)
          winograd_forward(y.data(), xs, w.data(), b.data(), shape, ws.data());
        else
          conv2d_forward(y.data(), xs, w.data(), b.data(), shape, ws.data());
        return y;
      };
      Conv2dShape one = s;
      one.n = 1;
      std::vector<T> alone;
      for (int i = 0; i < s.n; ++i) {
        const auto y = forward(one, x.data() + long(i) * s.c_in * s.h * s.w);
        alone.insert(alone.end(), y.begin(), y.end());
      }
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        EXPECT_TRUE(forward(s, x.data()) == alone) << threads << " threads";
      }
    }
  omp_set_num_threads(saved);
}

// The linear layer's forward likewise: a sample's output is the same bits alone, in any batch, split
// along either side of the output by any number of threads (work above kParallelMacs splits it).
TYPED_TEST(CpuKernelTest, LinearForwardIsBitwiseIndependentOfTheBatch) {
  using T = TypeParam;
  const int saved = omp_get_max_threads();
  // The last: the whole batch's depth in L2-sized pieces, a sample alone in one.
  for (auto [n, in, out] : {std::tuple{3, 33, 19}, {37, 300, 150}, {200, 100, 60}, {520, 300, 200}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n << " in=" << in << " out=" << out);
    const auto x = cast<T>(random_doubles(std::size_t(n) * in, 1));
    const auto w = cast<T>(random_doubles(std::size_t(out) * in, 2));
    const auto b = cast<T>(random_doubles(out, 3));
    std::vector<T> ws(std::max(linear_forward_workspace(1, in, out), linear_forward_workspace(n, in, out)));
    auto forward = [&](int rows, const T* xs) {
      std::vector<T> y(std::size_t(rows) * out);
      linear_forward(y.data(), xs, w.data(), b.data(), rows, in, out, ws.data(), true);
      return y;
    };
    std::vector<T> alone;
    for (int i = 0; i < n; ++i) {
      const auto y = forward(1, x.data() + std::size_t(i) * in);
      alone.insert(alone.end(), y.begin(), y.end());
    }
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      EXPECT_TRUE(forward(n, x.data()) == alone) << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

// ---- pooling

Pool2dShape pool_shape(int n, int c, int h, int w, int kh, int kw, int sh, int sw, int ph, int pw) {
  return {n, c, h, w, kh, kw, sh, sw, ph, pw, (h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1};
}

const std::vector<Pool2dShape>& pool_shapes() {
  static const std::vector<Pool2dShape> shapes = {
      pool_shape(3, 2, 7, 6, 3, 3, 2, 2, 1, 1),   // odd sizes, pad 1
      pool_shape(2, 3, 8, 7, 2, 3, 3, 2, 0, 1),   // non-square, stride > kernel in h
      pool_shape(2, 2, 6, 6, 3, 3, 1, 1, 1, 1),   // heavily overlapping windows
      pool_shape(2, 3, 8, 8, 2, 2, 2, 2, 0, 0),   // the classic 2x2 / 2
      pool_shape(2, 2, 7, 9, 2, 2, 2, 2, 0, 0),   // 2x2 / 2 dropping an odd last row and column
      pool_shape(2, 2, 5, 4, 2, 2, 1, 1, 1, 1),   // output larger than the input
      pool_shape(8, 16, 28, 28, 2, 2, 2, 2, 0, 0),  // big enough to split across threads
      pool_shape(1, 2, 6, 70, 2, 2, 2, 2, 0, 0),    // 2x2 / 2 rows of 35: two whole vectors and a tail
      pool_shape(1, 2, 4, 32, 2, 2, 2, 2, 0, 0),    // rows of exactly one vector
  };
  return shapes;
}

// f(y_index, x_index) for every window cell inside the image, in row-major order within the window.
void for_each_pool_cell(const Pool2dShape& s, const std::function<void(long, long)>& f) {
  for (long p = 0; p < long(s.n) * s.c; ++p)
    for (int oh = 0; oh < s.h_out; ++oh)
      for (int ow = 0; ow < s.w_out; ++ow)
        for (int ki = 0; ki < s.kh; ++ki)
          for (int kj = 0; kj < s.kw; ++kj) {
            const int ih = oh * s.stride_h - s.pad_h + ki, iw = ow * s.stride_w - s.pad_w + kj;
            if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
            f((p * s.h_out + oh) * s.w_out + ow, (p * s.h + ih) * s.w + iw);
          }
}

long pool_in_count(const Pool2dShape& s) { return long(s.n) * s.c * s.h * s.w; }
long pool_out_count(const Pool2dShape& s) { return long(s.n) * s.c * s.h_out * s.w_out; }

TYPED_TEST(CpuKernelTest, MaxPool) {
  using T = TypeParam;
  for (const Pool2dShape& s : pool_shapes()) {
    SCOPED_TRACE(::testing::Message() << "pool " << s.h << "x" << s.w << " k=" << s.kh << "x" << s.kw);
    Vec x = tied_vec(pool_in_count(s), 1), dy = random_doubles(pool_out_count(s), 2);
    // Negative inputs make a padding cell the larger one if it were (wrongly) counted as zero.
    for (double& e : x) e -= 3;
    round_to<T>(dy);
    Vec y(pool_out_count(s), -INFINITY), dx(pool_in_count(s), 0.0);
    std::vector<long> arg(y.size(), -1);
    for_each_pool_cell(s, [&](long yi, long xi) {
      if (x[xi] > y[yi]) y[yi] = x[xi], arg[yi] = xi;
    });
    for (std::size_t yi = 0; yi < y.size(); ++yi) dx[arg[yi]] += dy[yi];
    const auto tx = cast<T>(x), tdy = cast<T>(dy);
    // Each recorded window offset points at the reference maximum, and the backward through the
    // offsets gives the reference gradient.
    std::vector<uint8_t> am(y.size(), 255);
    check_outputs<T>({y}, false, [&](auto& o, bool) { max_pool2d_forward(o[0], am.data(), tx.data(), s); });
    for (long yi = 0; yi < long(y.size()); ++yi) {
      const long ow = yi % s.w_out, oh = yi / s.w_out % s.h_out, p = yi / (long(s.w_out) * s.h_out);
      const long ih = oh * s.stride_h - s.pad_h + am[yi] / s.kw, iw = ow * s.stride_w - s.pad_w + am[yi] % s.kw;
      ASSERT_EQ((p * s.h + ih) * s.w + iw, arg[yi]) << "output " << yi;
    }
    check_outputs<T>({dx}, true,
                     [&](auto& o, bool acc) { max_pool2d_backward(o[0], tdy.data(), am.data(), s, acc); });
  }
}

// NaN wins a max window (as in PyTorch), so a diverged activation is not hidden by pooling.
TYPED_TEST(CpuKernelTest, MaxPoolPropagatesNaN) {
  using T = TypeParam;
  for (const Pool2dShape& s : {pool_shape(1, 1, 4, 4, 2, 2, 2, 2, 0, 0), pool_shape(1, 1, 5, 5, 3, 3, 2, 2, 1, 1)}) {
    std::vector<T> x(pool_in_count(s), T(1)), y(pool_out_count(s));
    std::vector<uint8_t> am(y.size());
    x[s.w + 1] = std::numeric_limits<T>::quiet_NaN();  // row 1, column 1: inside the first window
    max_pool2d_forward(y.data(), am.data(), x.data(), s);
    EXPECT_TRUE(std::isnan(y[0])) << "k=" << s.kh;
    EXPECT_FALSE(std::isnan(y.back())) << "k=" << s.kh;
    const int ki = am[0] / s.kw, kj = am[0] % s.kw;
    EXPECT_EQ(ki - s.pad_h, 1) << "k=" << s.kh;
    EXPECT_EQ(kj - s.pad_w, 1) << "k=" << s.kh;
  }
}

TYPED_TEST(CpuKernelTest, AvgPool) {
  using T = TypeParam;
  for (const Pool2dShape& s : pool_shapes()) {
    SCOPED_TRACE(::testing::Message() << "pool " << s.h << "x" << s.w << " k=" << s.kh << "x" << s.kw);
    Vec x = random_doubles(pool_in_count(s), 1), dy = random_doubles(pool_out_count(s), 2);
    round_to<T>(x), round_to<T>(dy);
    Vec y(pool_out_count(s), 0.0), dx(pool_in_count(s), 0.0);
    const double area = s.kh * s.kw;
    for_each_pool_cell(s, [&](long yi, long xi) {
      y[yi] += x[xi] / area;
      dx[xi] += dy[yi] / area;
    });
    const auto tx = cast<T>(x), tdy = cast<T>(dy);
    check_outputs<T>({y}, false, [&](auto& o, bool) { avg_pool2d_forward(o[0], tx.data(), s); });
    check_outputs<T>({dx}, true, [&](auto& o, bool acc) { avg_pool2d_backward(o[0], tdy.data(), s, acc); });
  }
}

TYPED_TEST(CpuKernelTest, GlobalAvgPool) {
  using T = TypeParam;
  for (auto [n, c, hw] : {std::tuple{3, 5, 7}, {1, 1, 1}, {16, 64, 49}}) {
    Vec x = random_doubles(n * c * hw, 1), dy = random_doubles(n * c, 2);
    round_to<T>(x), round_to<T>(dy);
    Vec y(n * c, 0.0), dx(n * c * hw);
    for (int r = 0; r < n * c; ++r) {
      for (int j = 0; j < hw; ++j) {
        y[r] += x[r * hw + j] / hw;
        dx[r * hw + j] = dy[r] / hw;
      }
    }
    const auto tx = cast<T>(x), tdy = cast<T>(dy);
    check_outputs<T>({y}, false, [&](auto& o, bool) { global_avg_pool_forward(o[0], tx.data(), n, c, hw); });
    check_outputs<T>({dx}, true,
                     [&](auto& o, bool acc) { global_avg_pool_backward(o[0], tdy.data(), n, c, hw, acc); });
  }
}

// ---- elementwise

// ReLU propagates NaN as PyTorch does (a diverged activation stays visible) and passes no gradient
// through it.
TYPED_TEST(CpuKernelTest, ReluPropagatesNaN) {
  using T = TypeParam;
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const std::vector<T> x{T(-1), nan, T(2), T(0)}, dy{T(1), T(1), T(1), T(1)};
  std::vector<T> y(4), dx(4);
  relu_forward(y.data(), x.data(), 4);
  EXPECT_EQ(y[0], T(0));
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], T(2));
  EXPECT_EQ(y[3], T(0));
  relu_backward(dx.data(), dy.data(), y.data(), 4, false);
  EXPECT_EQ(dx, (std::vector<T>{T(0), T(0), T(1), T(0)}));
}

TYPED_TEST(CpuKernelTest, Elementwise) {
  using T = TypeParam;
  for (std::size_t count : {std::size_t{37}, std::size_t{100003}}) {
    Vec x = random_doubles(count, 1), a = random_doubles(count, 2), dy = random_doubles(count, 3);
    round_to<T>(x), round_to<T>(a), round_to<T>(dy);
    Vec relu(count), drelu(count), sum(count);
    for (std::size_t i = 0; i < count; ++i) {
      relu[i] = x[i] <= 0 ? 0 : x[i];
      drelu[i] = x[i] > 0 ? dy[i] : 0;
      sum[i] = x[i] + a[i];
    }
    const auto tx = cast<T>(x), ta = cast<T>(a), tdy = cast<T>(dy), ty = cast<T>(relu);
    check_outputs<T>({relu}, false, [&](auto& o, bool) { relu_forward(o[0], tx.data(), count); });
    check_outputs<T>({drelu}, true,
                     [&](auto& o, bool acc) { relu_backward(o[0], tdy.data(), ty.data(), count, acc); });
    check_outputs<T>({sum}, false, [&](auto& o, bool) { add_forward(o[0], tx.data(), ta.data(), count); });
    check_outputs<T>({x}, true, [&](auto& o, bool acc) { copy_or_accumulate(o[0], tx.data(), count, acc); });

    // In place: y aliases x, dx aliases dy, y aliases a.
    auto buf = tx;
    relu_forward(buf.data(), buf.data(), count);
    expect_close(buf, relu, "relu in place");
    buf = tdy;
    relu_backward(buf.data(), buf.data(), ty.data(), count, false);
    expect_close(buf, drelu, "relu backward in place");
    buf = tx;
    add_forward(buf.data(), buf.data(), ta.data(), count);
    expect_close(buf, sum, "add in place");
  }
}

// LeakyReLU and Hardtanh against their definitions (PyTorch's: the slope at 0 is negative_slope, a
// bound itself passes no gradient), both write modes, in place, and NaN through the forward only.
TYPED_TEST(CpuKernelTest, LeakyReluAndHardtanh) {
  using T = TypeParam;
  const std::size_t count = 40003;
  Vec x = random_doubles(count, 4, -8, 8), dy = random_doubles(count, 5);
  round_to<T>(x), round_to<T>(dy);
  x[0] = 0, x[1] = 6, x[2] = -1;  // at ReLU6's bounds, and the value -1 that the clamp below keeps
  const double slope = 0.25, lo = -1, hi = 6;
  Vec leaky(count), dleaky(count), clamp(count), dclamp(count);
  for (std::size_t i = 0; i < count; ++i) {
    leaky[i] = x[i] > 0 ? x[i] : slope * x[i];
    dleaky[i] = x[i] > 0 ? dy[i] : slope * dy[i];
    clamp[i] = std::min(std::max(x[i], lo), hi);
    dclamp[i] = x[i] > lo && x[i] < hi ? dy[i] : 0;
  }
  const auto tx = cast<T>(x), tdy = cast<T>(dy), tleaky = cast<T>(leaky), tclamp = cast<T>(clamp);
  check_outputs<T>({leaky}, false, [&](auto& o, bool) { leaky_relu_forward(o[0], tx.data(), count, slope); });
  check_outputs<T>({dleaky}, true, [&](auto& o, bool acc) {
    leaky_relu_backward(o[0], tdy.data(), tleaky.data(), count, slope, acc);
  });
  check_outputs<T>({clamp}, false, [&](auto& o, bool) { hardtanh_forward(o[0], tx.data(), count, lo, hi); });
  check_outputs<T>({dclamp}, true, [&](auto& o, bool acc) {
    hardtanh_backward(o[0], tdy.data(), tclamp.data(), count, lo, hi, acc);
  });
  auto buf = tx;
  hardtanh_forward(buf.data(), buf.data(), count, lo, hi);
  expect_close(buf, clamp, "hardtanh in place");
  buf = tdy;
  leaky_relu_backward(buf.data(), buf.data(), tleaky.data(), count, slope, false);
  expect_close(buf, dleaky, "leaky relu backward in place");

  const T nan = std::numeric_limits<T>::quiet_NaN();
  const std::vector<T> nx{nan, T(-2)}, ones{T(1), T(1)};
  std::vector<T> y(2), dx(2);
  leaky_relu_forward(y.data(), nx.data(), 2, slope);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], T(-0.5));
  leaky_relu_backward(dx.data(), ones.data(), y.data(), 2, slope, false);
  EXPECT_EQ(dx, (std::vector<T>{T(0), T(0.25)}));
  hardtanh_forward(y.data(), nx.data(), 2, lo, hi);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], T(-1));
  hardtanh_backward(dx.data(), ones.data(), y.data(), 2, lo, hi, false);
  EXPECT_EQ(dx, (std::vector<T>{T(0), T(0)}));
}

// ---- softmax cross-entropy

TYPED_TEST(CpuKernelTest, SoftmaxXent) {
  using T = TypeParam;
  for (double magnitude : {3.0, 1000.0}) {
    const int n = 6, k = 7;
    Vec z = random_doubles(n * k, 1, -magnitude, magnitude);
    round_to<T>(z);
    const std::vector<int32_t> labels = {0, 6, 3, 3, 1, 5};
    Vec probs(n * k), grad(n * k);
    double loss = 0;
    const double scale = 1.0 / n;
    for (int i = 0; i < n; ++i) {
      double zmax = -INFINITY, sum = 0;
      for (int j = 0; j < k; ++j) zmax = std::max(zmax, z[i * k + j]);
      for (int j = 0; j < k; ++j) sum += std::exp(z[i * k + j] - zmax);
      for (int j = 0; j < k; ++j) probs[i * k + j] = std::exp(z[i * k + j] - zmax) / sum;
      loss += zmax + std::log(sum) - z[i * k + labels[i]];
      for (int j = 0; j < k; ++j) grad[i * k + j] = scale * (probs[i * k + j] - (j == labels[i]));
    }
    const auto tz = cast<T>(z);
    double got_loss = kNaN;
    check_outputs<T>({probs}, false, [&](auto& o, bool) {
      got_loss = softmax_xent_forward(o[0], tz.data(), labels.data(), n, k);
    });
    ASSERT_TRUE(std::isfinite(got_loss));
    EXPECT_NEAR(got_loss, loss, tolerance<T>() * (1 + std::abs(loss)));
    const auto tprobs = cast<T>(probs);
    check_outputs<T>({grad}, true, [&](auto& o, bool acc) {
      softmax_xent_backward(o[0], tprobs.data(), labels.data(), n, k, T(scale), acc);
    });
  }
}

TYPED_TEST(CpuKernelTest, CountCorrect) {
  using T = TypeParam;
  // Rows 1 and 3 tie; the first maximum decides.
  const std::vector<T> probs = {0.1, 0.7, 0.2,  0.4, 0.2, 0.4,  0.3, 0.3, 0.4,  0.5, 0.5, 0.0};
  EXPECT_EQ(count_correct(probs.data(), std::vector<int32_t>{1, 0, 2, 0}.data(), 4, 3), 4);
  EXPECT_EQ(count_correct(probs.data(), std::vector<int32_t>{0, 2, 2, 1}.data(), 4, 3), 1);
  // NaN is the largest value (torch.argmax): the first NaN of a row is its prediction, wherever it is.
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const std::vector<T> with_nan = {nan, nan, nan,  0.9, nan, 0.1,  0.2, 0.7, nan,  nan, 0.5, 0.5};
  EXPECT_EQ(count_correct(with_nan.data(), std::vector<int32_t>{0, 1, 2, 0}.data(), 4, 3), 4);
  EXPECT_EQ(count_correct(with_nan.data(), std::vector<int32_t>{1, 0, 1, 1}.data(), 4, 3), 0);
}

// ---- SGD

// torch.optim.SGD step (dampening 0), op for op in float.
void reference_sgd(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& buf, float lr,
                   float momentum, float wd, bool nesterov, bool first) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    float d = g[i] + wd * p[i];
    if (momentum != 0) {
      buf[i] = first ? d : momentum * buf[i] + d;
      d = nesterov ? d + momentum * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

TEST(CpuKernelSgd, MatchesTorchSemantics) {
  for (std::size_t count : {std::size_t{41}, std::size_t{100003}}) {
    for (auto [momentum, wd, nesterov] : {std::tuple{0.9f, 0.01f, false}, {0.9f, 0.0f, false}, {0.0f, 0.01f, false},
                                          {0.9f, 0.01f, true}}) {
      std::vector<float> p = cast<float>(random_doubles(count, 1)), want_p = p;
      // The buffer starts as NaN: the first step must overwrite it without reading.
      std::vector<float> buf(count, NAN), want_buf(count, 0.0f);
      for (int step = 0; step < 3; ++step) {
        const std::vector<float> g = cast<float>(random_doubles(count, 10 + step));
        reference_sgd(want_p, g, want_buf, 0.1f, momentum, wd, nesterov, step == 0);
        sgd_momentum_step(p.data(), g.data(), momentum != 0 ? buf.data() : nullptr, count, 0.1f, momentum, wd,
                          nesterov, step == 0);
        for (std::size_t i = 0; i < count; ++i) {
          ASSERT_NEAR(p[i], want_p[i], 1e-6f * (1 + std::abs(want_p[i]))) << "step " << step << " [" << i << "]";
          if (momentum != 0) {
            ASSERT_NEAR(buf[i], want_buf[i], 1e-6f * (1 + std::abs(want_buf[i])));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace crumb::cpu
