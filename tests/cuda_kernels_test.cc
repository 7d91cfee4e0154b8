// CUDA kernels against their CPU twins (kernels/cpu/<family>.h) on the same random float inputs, in both
// write modes, at ragged sizes; bit for bit where the CUDA kernel adds in the CPU's order (pooling). Every
// test that touches a device skips without one; the status-check tests run everywhere.
#if CRUMB_HAVE_CUDA

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "engine/base/error.h"
#include "kernels/conv2d.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/reduce.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/half.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "kernels/pool.h"
#include "kernels/sgd.h"
#include "kernels/softmax_xent.h"
#include "tests/test_util.h"
#if CRUMB_HAVE_CUDNN
#include "kernels/cuda/cudnn_conv.h"
#endif

namespace crumb::cuda {
namespace {

using Floats = std::vector<float>;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
using test::expect_bits;
using test::expect_same;
using test::random_floats;
constexpr double kTolerance = test::kParityTolerance;

// Relative to the element and to the output's RMS (at least 1): a long float sum may cancel to near zero.
void expect_close(const Floats& got, const Floats& want, const std::string& what) {
  test::expect_close(got, want, kTolerance, what, test::rms_at_least_1(want));
}

// Owns count elements of device memory.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(std::size_t count) : count_(count) {
    CRUMB_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<std::size_t>(count, 1) * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), count_);
    CRUMB_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  // Synchronises with the legacy default stream, which every test enqueues on, and so also reports
  // faults of the kernels before it.
  std::vector<T> download() const {
    std::vector<T> host(count_);
    CRUMB_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  T* get() const { return ptr_; }

 private:
  std::size_t count_;
  T* ptr_ = nullptr;
};

using Run = std::function<void(const std::vector<float*>&, bool accumulate)>;

// Runs a CPU kernel and its CUDA twin on outputs of the given sizes, pre-filled for each write mode:
// NaN for accumulate=false, so a read of the old contents shows; the same random values on both sides
// for accumulate=true. Then compares every output, within float rounding or, if `exact`, bit for bit.
void check_against_cpu(const std::vector<std::size_t>& sizes, bool has_accumulate, const Run& cpu, const Run& gpu,
                       const std::string& what, bool exact = false) {
  for (bool accumulate : {false, true}) {
    if (accumulate && !has_accumulate) break;
    std::vector<Floats> host;
    std::vector<std::unique_ptr<DeviceArray<float>>> device;
    std::vector<float*> host_ptrs, device_ptrs;
    for (std::size_t o = 0; o < sizes.size(); ++o) {
      host.push_back(accumulate ? random_floats(sizes[o], 100 + unsigned(o)) : Floats(sizes[o], kNaN));
      device.push_back(std::make_unique<DeviceArray<float>>(host.back()));
    }
    for (std::size_t o = 0; o < sizes.size(); ++o) {
      host_ptrs.push_back(host[o].data());
      device_ptrs.push_back(device[o]->get());
    }
    cpu(host_ptrs, accumulate);
    gpu(device_ptrs, accumulate);
    for (std::size_t o = 0; o < sizes.size(); ++o) {
      const std::string name = what + " output " + std::to_string(o) + (accumulate ? " (+=)" : " (=)");
      if (exact) {
        expect_same(device[o]->download(), host[o], name);
      } else {
        expect_close(device[o]->download(), host[o], name);
      }
    }
  }
}

// ---- status checks (no device needed)

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no crumb::Error thrown)";
}

TEST(CudaCheck, MacroReportsTheFailingCall) {
  // Fails with or without a device: an invalid device id, or no usable driver at all.
  const std::string msg = message_of([] { CRUMB_CUDA_CHECK(cudaSetDevice(-1)); });
  cudaGetLastError();
  EXPECT_NE(msg.find("cudaSetDevice(-1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(__FILE__), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDA error"), std::string::npos) << msg;
}

TEST(CudaCheck, FunctionsNameLibraryStatusAndPlace) {
  EXPECT_NO_THROW(check_cuda(cudaSuccess, "ok()", "f.cc", 1));
  EXPECT_NO_THROW(check_cublas(CUBLAS_STATUS_SUCCESS, "ok()", "f.cc", 1));
  std::string msg = message_of([] { check_cuda(cudaErrorInvalidValue, "fake_call(1, 2)", "some/file.cc", 42); });
  EXPECT_NE(msg.find("some/file.cc:42"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fake_call(1, 2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << msg;
  EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
  msg = message_of([] { check_cublas(CUBLAS_STATUS_INVALID_VALUE, "cublasFake()", "b.cc", 7); });
  EXPECT_NE(msg.find("cuBLAS error at b.cc:7: cublasFake()"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUBLAS_STATUS_INVALID_VALUE"), std::string::npos) << msg;
#if CRUMB_HAVE_CUDNN
  EXPECT_NO_THROW(check_cudnn(CUDNN_STATUS_SUCCESS, "ok()", "f.cc", 1));
  msg = message_of([] { check_cudnn(CUDNN_STATUS_BAD_PARAM, "cudnnFake()", "c.cc", 9); });
  EXPECT_NE(msg.find("cuDNN error at c.cc:9: cudnnFake()"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CUDNN_STATUS_BAD_PARAM"), std::string::npos) << msg;
#endif
}

TEST(CudaCheck, DeviceProbeIsStable) {
  const bool available = cuda_device_available();
  EXPECT_EQ(cuda_device_available(), available);
  // Without a usable driver every runtime call reports that again, so only a working runtime must be clean.
  if (available) {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

// ---- elementwise, reductions, softmax cross-entropy, SGD

TEST(CudaKernels, Elementwise) {
  CRUMB_REQUIRE_GPU();
  // Neither count is a multiple of 4 or of a block.
  for (std::size_t count : {std::size_t{37}, std::size_t{100003}}) {
    const Floats x = random_floats(count, 1), a = random_floats(count, 2), dy = random_floats(count, 3);
    Floats y(count);
    cpu::relu_forward(y.data(), x.data(), count);
    const DeviceArray<float> dev_x(x), dev_a(a), dev_dy(dy), dev_y(y);
    const std::string at = " count=" + std::to_string(count);
    check_against_cpu(
        {count}, false, [&](auto& o, bool) { cpu::relu_forward(o[0], x.data(), count); },
        [&](auto& o, bool) { relu_forward(o[0], dev_x.get(), count, nullptr); }, "relu_forward" + at);
    check_against_cpu(
        {count}, true, [&](auto& o, bool acc) { cpu::relu_backward(o[0], dy.data(), y.data(), count, acc); },
        [&](auto& o, bool acc) { relu_backward(o[0], dev_dy.get(), dev_y.get(), count, acc, nullptr); },
        "relu_backward" + at);
    check_against_cpu(
        {count}, false, [&](auto& o, bool) { cpu::add_forward(o[0], x.data(), a.data(), count); },
        [&](auto& o, bool) { add_forward(o[0], dev_x.get(), dev_a.get(), count, nullptr); }, "add_forward" + at);
    check_against_cpu(
        {count}, true, [&](auto& o, bool acc) { cpu::copy_or_accumulate(o[0], x.data(), count, acc); },
        [&](auto& o, bool acc) { copy_or_accumulate(o[0], dev_x.get(), count, acc, nullptr); },
        "copy_or_accumulate" + at);

    // In place: y aliases x, dx aliases dy, y aliases a.
    Floats want = x;
    cpu::relu_forward(want.data(), want.data(), count);
    DeviceArray<float> buf(x);
    relu_forward(buf.get(), buf.get(), count, nullptr);
    expect_close(buf.download(), want, "relu_forward in place" + at);
    want = dy;
    cpu::relu_backward(want.data(), want.data(), y.data(), count, true);
    buf.upload(dy);
    relu_backward(buf.get(), buf.get(), dev_y.get(), count, true, nullptr);
    expect_close(buf.download(), want, "relu_backward in place" + at);
    want = a;
    cpu::add_forward(want.data(), want.data(), x.data(), count);
    buf.upload(a);
    add_forward(buf.get(), buf.get(), dev_x.get(), count, nullptr);
    expect_close(buf.download(), want, "add_forward in place" + at);
  }
}

// [n, c, hw] shapes: generic, a linear layer's [n, c] (hw = 1), a LeNet feature map.
const std::vector<std::tuple<int, int, int>> kNchwShapes = {{3, 5, 7}, {37, 10, 1}, {16, 6, 784}};

// db [c] (=|+=) the sum of dy [n, c, hw] over n and hw, in double. The CPU has this only inside its
// conv/linear kernels, so the twin here is a plain loop.
void bias_backward_reference(float* db, const Floats& dy, int n, int c, int hw, bool accumulate) {
  for (int ch = 0; ch < c; ++ch) {
    double sum = 0;
    for (int i = 0; i < n; ++i)
      for (int p = 0; p < hw; ++p) sum += dy[(std::size_t(i) * c + ch) * hw + p];
    db[ch] = float(accumulate ? db[ch] + sum : sum);
  }
}

TEST(CudaKernels, Bias) {
  CRUMB_REQUIRE_GPU();
  for (auto [n, c, hw] : kNchwShapes) {
    const std::size_t count = std::size_t(n) * c * hw;
    const Floats y0 = random_floats(count, 1), b = random_floats(c, 2), dy = random_floats(count, 3);
    const DeviceArray<float> dev_b(b), dev_dy(dy);
    const std::string at = " n=" + std::to_string(n) + " c=" + std::to_string(c) + " hw=" + std::to_string(hw);
    // The CPU has these only inside its conv/linear kernels, so the twins here are plain loops.
    Floats want = y0;
    for (std::size_t i = 0; i < count; ++i) want[i] += b[(i / hw) % c];
    DeviceArray<float> y(y0);
    bias_add_nchw(y.get(), dev_b.get(), n, c, hw, nullptr);
    expect_close(y.download(), want, "bias_add_nchw" + at);
    check_against_cpu(
        {std::size_t(c)}, true,
        [&](auto& o, bool acc) { bias_backward_reference(o[0], dy, n, c, hw, acc); },
        [&](auto& o, bool acc) { bias_backward_nchw(o[0], dev_dy.get(), n, c, hw, acc, nullptr); },
        "bias_backward_nchw" + at);
  }
}

TEST(CudaKernels, GlobalAvgPool) {
  CRUMB_REQUIRE_GPU();
  for (auto [n, c, hw] : kNchwShapes) {
    const std::size_t count = std::size_t(n) * c * hw, rows = std::size_t(n) * c;
    const Floats x = random_floats(count, 1), dy = random_floats(rows, 2);
    const DeviceArray<float> dev_x(x), dev_dy(dy);
    const std::string at = " n=" + std::to_string(n) + " c=" + std::to_string(c) + " hw=" + std::to_string(hw);
    check_against_cpu(
        {rows}, false, [&](auto& o, bool) { cpu::global_avg_pool_forward(o[0], x.data(), n, c, hw); },
        [&](auto& o, bool) { global_avg_pool_forward(o[0], dev_x.get(), n, c, hw, nullptr); },
        "global_avg_pool_forward" + at);
    check_against_cpu(
        {count}, true, [&](auto& o, bool acc) { cpu::global_avg_pool_backward(o[0], dy.data(), n, c, hw, acc); },
        [&](auto& o, bool acc) { global_avg_pool_backward(o[0], dev_dy.get(), n, c, hw, acc, nullptr); },
        "global_avg_pool_backward" + at);
  }
}

TEST(CudaKernels, SoftmaxXent) {
  CRUMB_REQUIRE_GPU();
  // k = 10: fewer classes than warp lanes; k = 1000: many columns per lane. Magnitude 1000 drives most
  // probs to 0, so only the max-subtracted loss stays finite.
  for (auto [n, k, magnitude] : {std::tuple{37, 10, 3.0f}, {37, 10, 1000.0f}, {300, 1000, 5.0f}}) {
    const std::string at = " n=" + std::to_string(n) + " k=" + std::to_string(k) + " |z|<=" + std::to_string(magnitude);
    const std::size_t count = std::size_t(n) * k;
    const Floats z = random_floats(count, 1, -magnitude, magnitude);
    // Every third label is the row's argmax, so the correct count is neither 0 nor n.
    std::mt19937 gen(2);
    std::vector<int32_t> labels(n);
    for (int i = 0; i < n; ++i) {
      const float* row = z.data() + std::size_t(i) * k;
      labels[i] = i % 3 == 0 ? int32_t(std::max_element(row, row + k) - row) : int32_t(gen() % k);
    }
    const DeviceArray<float> dev_z(z);
    const DeviceArray<int32_t> dev_labels(labels);

    Floats probs(count);
    const double loss = cpu::softmax_xent_forward(probs.data(), z.data(), labels.data(), n, k);
    const int correct = cpu::count_correct(probs.data(), labels.data(), n, k);
    // The counters start non-zero: the kernel adds to them.
    const double loss0 = 1.5;
    const unsigned long long correct0 = 2;
    DeviceArray<float> dev_probs(Floats(count, kNaN));
    DeviceArray<double> dev_loss(std::vector<double>{loss0});
    DeviceArray<unsigned long long> dev_correct(std::vector<unsigned long long>{correct0});
    softmax_xent_forward(dev_probs.get(), dev_z.get(), dev_labels.get(), n, k, dev_loss.get(), dev_correct.get(),
                         nullptr);
    expect_close(dev_probs.download(), probs, "softmax_xent_forward probs" + at);
    EXPECT_NEAR(dev_loss.download()[0] - loss0, loss, kTolerance * (1 + std::abs(loss))) << at;
    EXPECT_EQ(dev_correct.download()[0] - correct0, static_cast<unsigned long long>(correct)) << at;

    const float scale = 1.0f / n;
    check_against_cpu(
        {count}, true,
        [&](auto& o, bool acc) { cpu::softmax_xent_backward(o[0], probs.data(), labels.data(), n, k, scale, acc); },
        [&](auto& o, bool acc) {
          softmax_xent_backward(o[0], dev_probs.get(), dev_labels.get(), n, k, scale, acc, nullptr);
        },
        "softmax_xent_backward" + at);
  }
}

// A row holding a NaN has NaN probabilities throughout (its max is NaN), so it predicts class 0 on both
// devices (torch.argmax's rule: the first NaN wins), all-NaN rows included.
TEST(CudaKernels, SoftmaxXentCountsNaNRowsAsTheCpu) {
  CRUMB_REQUIRE_GPU();
  const int n = 6, k = 40;  // more classes than lanes: NaNs in different lanes' columns
  Floats z = random_floats(std::size_t(n) * k, 3, -2.0f, 2.0f);
  for (int j = 0; j < k; ++j) z[j] = kNaN;  // row 0: all NaN
  z[1 * k + 35] = kNaN;                      // row 1: one NaN, in lane 3's second column
  z[2 * k + 7] = z[2 * k + 33] = kNaN;       // row 2: two NaNs
  // Rows 0 and 1 are labelled 0 (their prediction), row 2 is not; the finite rows by their argmax.
  std::vector<int32_t> labels = {0, 0, 7};
  for (int i = 3; i < n; ++i) {
    const float* row = z.data() + std::size_t(i) * k;
    labels.push_back(int32_t(std::max_element(row, row + k) - row));
  }
  Floats probs(z.size());
  cpu::softmax_xent_forward(probs.data(), z.data(), labels.data(), n, k);
  ASSERT_EQ(cpu::count_correct(probs.data(), labels.data(), n, k), 5);

  const DeviceArray<float> dev_z(z);
  const DeviceArray<int32_t> dev_labels(labels);
  DeviceArray<float> dev_probs(Floats(z.size(), 0.0f));
  DeviceArray<double> dev_loss(std::vector<double>{0.0});
  DeviceArray<unsigned long long> dev_correct(std::vector<unsigned long long>{0});
  softmax_xent_forward(dev_probs.get(), dev_z.get(), dev_labels.get(), n, k, dev_loss.get(), dev_correct.get(),
                       nullptr);
  EXPECT_TRUE(std::isnan(dev_loss.download()[0]));
  EXPECT_EQ(dev_correct.download()[0], 5u);
}

TEST(CudaKernels, SgdThreeSteps) {
  CRUMB_REQUIRE_GPU();
  for (std::size_t count : {std::size_t{41}, std::size_t{100003}}) {
    for (auto [momentum, wd, nesterov] : {std::tuple{0.9f, 0.01f, false}, {0.9f, 0.0f, false}, {0.0f, 0.01f, false},
                                          {0.9f, 0.01f, true}}) {
      const std::string at = " count=" + std::to_string(count) + " momentum=" + std::to_string(momentum) +
                             " wd=" + std::to_string(wd) + " nesterov=" + std::to_string(nesterov);
      Floats p = random_floats(count, 1);
      // The buffer starts as NaN: the first step must overwrite it without reading.
      Floats buf(count, kNaN);
      DeviceArray<float> dev_p(p), dev_buf(buf);
      for (int step = 0; step < 3; ++step) {
        const Floats g = random_floats(count, 10 + step);
        const DeviceArray<float> dev_g(g);
        cpu::sgd_momentum_step(p.data(), g.data(), momentum != 0 ? buf.data() : nullptr, count, 0.1f, momentum, wd,
                               nesterov, step == 0);
        sgd_momentum_step(dev_p.get(), dev_g.get(), momentum != 0 ? dev_buf.get() : nullptr, count, 0.1f, momentum, wd,
                          nesterov, step == 0, StepExtras{}, nullptr);
        expect_close(dev_p.download(), p, "sgd params step " + std::to_string(step) + at);
        if (momentum != 0) expect_close(dev_buf.download(), buf, "sgd momentum step " + std::to_string(step) + at);
      }
    }
  }
}

// ---- pooling: bit-for-bit parity with the CPU, argmax included

cpu::Pool2dShape pool_shape(int n, int c, int h, int w, int kh, int kw, int sh, int sw, int ph, int pw) {
  return {n, c, h, w, kh, kw, sh, sw, ph, pw, (h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1};
}

const std::vector<cpu::Pool2dShape> kPoolShapes = {
    pool_shape(8, 6, 28, 28, 2, 2, 2, 2, 0, 0),    // LeNet's 2x2 / 2 (the CPU's dedicated kernel)
    pool_shape(3, 5, 7, 9, 2, 2, 2, 2, 0, 0),      // 2x2 / 2 at odd sizes: the floor drops a row and a column
    pool_shape(3, 5, 8, 8, 3, 3, 1, 1, 1, 1),      // 3x3 / 1 pad 1: heavily overlapping windows
    pool_shape(3, 5, 9, 7, 3, 3, 2, 2, 1, 1),      // 3x3 / 2 pad 1 at odd sizes (ResNet's stem pool)
    pool_shape(3, 5, 11, 10, 3, 2, 2, 3, 1, 0),    // non-square; stride > kernel in w leaves columns uncovered
    pool_shape(3, 5, 5, 4, 2, 2, 1, 1, 1, 1),      // output larger than the input
    pool_shape(3, 5, 6, 7, 2, 2, 2, 2, 1, 1),      // 2x2 / 2 padded: the CPU's general path with 2x2 windows
    pool_shape(2, 3, 19, 18, 16, 16, 1, 2, 8, 0),  // 256-cell windows: argmax up to 255
    pool_shape(3, 5, 1, 1, 1, 1, 1, 1, 0, 0),      // 1x1 identity
    pool_shape(1, 2, 6, 1000, 3, 3, 1, 1, 1, 1),   // wide rows: the CPU works in bands of a few output rows
};

std::string pool_name(const cpu::Pool2dShape& s) {
  return " n=" + std::to_string(s.n) + " c=" + std::to_string(s.c) + " " + std::to_string(s.h) + "x" +
         std::to_string(s.w) + " k=" + std::to_string(s.kh) + "x" + std::to_string(s.kw) +
         " stride=" + std::to_string(s.stride_h) + "," + std::to_string(s.stride_w) +
         " pad=" + std::to_string(s.pad_h) + "," + std::to_string(s.pad_w);
}

// Pooling inputs, all negative, so that a padding cell wrongly read as zero would win a max:
// - continuous: no ties;
// - ties: quantised to -4, -3, -2, so most windows hold tied maxima, and plane 1 all -inf, so every
//   window's maximum is tied over the whole window;
// - ties and NaN: as ties, with two NaNs of different payloads near the corner of plane 0, at (0, 1) and
//   (1, 0), which the CPU's 2x2 / 2 kernel and its general path order differently, and one in the middle
//   of the last plane.
enum class PoolInput { kContinuous, kTies, kTiesAndNaN };

float nan_with_bits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

Floats pool_input(const cpu::Pool2dShape& s, PoolInput kind) {
  const std::size_t plane = std::size_t(s.h) * s.w, planes = std::size_t(s.n) * s.c;
  Floats x = random_floats(planes * plane, 1, -4, -1);
  if (kind == PoolInput::kContinuous) return x;
  for (float& e : x) e = std::floor(e);
  if (planes > 1) std::fill(x.begin() + plane, x.begin() + 2 * plane, -std::numeric_limits<float>::infinity());
  if (kind == PoolInput::kTiesAndNaN) {
    if (s.w > 1) x[1] = kNaN;
    if (s.h > 1) x[s.w] = nan_with_bits(0xffc00123u);
    x[(planes - 1) * plane + std::size_t(s.h / 2) * s.w + s.w / 2] = kNaN;
  }
  return x;
}

const char* pool_input_name(PoolInput kind) {
  switch (kind) {
    case PoolInput::kContinuous:
      return " (continuous)";
    case PoolInput::kTies:
      return " (ties)";
    case PoolInput::kTiesAndNaN:
      return " (ties, NaN)";
  }
  return "";
}

std::size_t pool_out_count(const cpu::Pool2dShape& s) { return std::size_t(s.n) * s.c * s.h_out * s.w_out; }
std::size_t pool_in_count(const cpu::Pool2dShape& s) { return std::size_t(s.n) * s.c * s.h * s.w; }

TEST(CudaKernels, MaxPool2d) {
  CRUMB_REQUIRE_GPU();
  for (const cpu::Pool2dShape& s : kPoolShapes) {
    for (PoolInput kind : {PoolInput::kContinuous, PoolInput::kTies, PoolInput::kTiesAndNaN}) {
      const std::string at = pool_name(s) + pool_input_name(kind);
      const std::size_t in = pool_in_count(s), out = pool_out_count(s);
      const Floats x = pool_input(s, kind);
      Floats y(out);
      std::vector<uint8_t> argmax(out);
      cpu::max_pool2d_forward(y.data(), argmax.data(), x.data(), s);
      if (kind == PoolInput::kTiesAndNaN) {
        EXPECT_TRUE(std::any_of(y.begin(), y.end(), [](float v) { return std::isnan(v); })) << at;
      }

      // Outputs pre-filled with values the kernel never writes.
      const DeviceArray<float> dev_x(x);
      DeviceArray<float> dev_y(Floats(out, kNaN));
      DeviceArray<uint8_t> dev_argmax(std::vector<uint8_t>(out, 0xff));
      max_pool2d_forward(dev_y.get(), dev_argmax.get(), dev_x.get(), s, nullptr);
      expect_bits(dev_y.download(), y, "max_pool2d_forward y" + at);
      const std::vector<uint8_t> got_argmax = dev_argmax.download();
      for (std::size_t o = 0; o < out; ++o) {
        if (got_argmax[o] != argmax[o]) {
          ADD_FAILURE() << "max_pool2d_forward argmax" << at << " [" << o << "]: cuda " << int(got_argmax[o])
                        << ", cpu " << int(argmax[o]);
          break;
        }
      }

      // The backward routes through the CPU's argmax, so it is checked on its own.
      const Floats dy = random_floats(out, 2);
      const DeviceArray<float> dev_dy(dy);
      const DeviceArray<uint8_t> dev_cpu_argmax(argmax);
      check_against_cpu(
          {in}, true, [&](auto& o, bool acc) { cpu::max_pool2d_backward(o[0], dy.data(), argmax.data(), s, acc); },
          [&](auto& o, bool acc) { max_pool2d_backward(o[0], dev_dy.get(), dev_cpu_argmax.get(), s, acc, nullptr); },
          "max_pool2d_backward" + at, /*exact=*/true);
    }
  }
}

TEST(CudaKernels, AvgPool2d) {
  CRUMB_REQUIRE_GPU();
  for (const cpu::Pool2dShape& s : kPoolShapes) {
    const std::size_t in = pool_in_count(s), out = pool_out_count(s);
    for (PoolInput kind : {PoolInput::kContinuous, PoolInput::kTies, PoolInput::kTiesAndNaN}) {
      const std::string at = pool_name(s) + pool_input_name(kind);
      const Floats x = pool_input(s, kind);
      const DeviceArray<float> dev_x(x);
      check_against_cpu(
          {out}, false, [&](auto& o, bool) { cpu::avg_pool2d_forward(o[0], x.data(), s); },
          [&](auto& o, bool) { avg_pool2d_forward(o[0], dev_x.get(), s, nullptr); }, "avg_pool2d_forward" + at,
          /*exact=*/true);
    }
    // The backward reads only dy. Its multiply-adds are fused on the device and fused or not on the CPU,
    // depending on the build's target, so it is compared within rounding.
    const Floats dy = random_floats(out, 2);
    const DeviceArray<float> dev_dy(dy);
    check_against_cpu(
        {in}, true, [&](auto& o, bool acc) { cpu::avg_pool2d_backward(o[0], dy.data(), s, acc); },
        [&](auto& o, bool acc) { avg_pool2d_backward(o[0], dev_dy.get(), s, acc, nullptr); },
        "avg_pool2d_backward" + pool_name(s));
  }
}

// The launchers check their shapes before touching a device, so these run everywhere.
TEST(CudaPoolChecks, RejectBadShapes) {
  const cpu::Pool2dShape good = pool_shape(2, 3, 8, 8, 3, 3, 2, 2, 1, 1);
  auto with = [&](auto edit) {
    cpu::Pool2dShape s = good;
    edit(s);
    return s;
  };
  const std::vector<std::pair<cpu::Pool2dShape, const char*>> bad = {
      {with([](cpu::Pool2dShape& s) { s.h_out += 1; }), "output not the floor size"},
      {with([](cpu::Pool2dShape& s) { s.w_out -= 1; }), "output not the floor size"},
      {pool_shape(2, 3, 8, 8, 3, 3, 2, 2, 2, 1), "padding over half the window"},
      {pool_shape(2, 3, 2, 8, 5, 3, 1, 1, 1, 1), "window larger than the padded input"},
      {with([](cpu::Pool2dShape& s) { s.stride_w = 0; }), "zero stride"},
      {with([](cpu::Pool2dShape& s) { s.pad_h = -1; }), "negative padding"},
      {with([](cpu::Pool2dShape& s) { s.c = -1; }), "negative channels"},
  };
  for (const auto& [s, why] : bad) {
    EXPECT_THROW(max_pool2d_forward<float>(nullptr, nullptr, nullptr, s, nullptr), Error) << why;
    EXPECT_THROW(max_pool2d_backward<float>(nullptr, nullptr, nullptr, s, false, nullptr), Error) << why;
    EXPECT_THROW(avg_pool2d_forward<float>(nullptr, nullptr, s, nullptr), Error) << why;
    EXPECT_THROW(avg_pool2d_backward<float>(nullptr, nullptr, s, true, nullptr), Error) << why;
  }
  // An empty batch launches nothing; windows over 256 cells do not fit the max pool's 1-byte argmax.
  const cpu::Pool2dShape empty = with([](cpu::Pool2dShape& s) { s.n = 0; });
  EXPECT_NO_THROW(max_pool2d_forward<float>(nullptr, nullptr, nullptr, empty, nullptr));
  EXPECT_NO_THROW(max_pool2d_backward<float>(nullptr, nullptr, nullptr, empty, true, nullptr));
  EXPECT_NO_THROW(avg_pool2d_forward<float>(nullptr, nullptr, empty, nullptr));
  EXPECT_NO_THROW(avg_pool2d_backward<float>(nullptr, nullptr, empty, false, nullptr));
  const cpu::Pool2dShape wide = pool_shape(0, 1, 17, 17, 17, 17, 1, 1, 0, 0);
  EXPECT_THROW(max_pool2d_forward<float>(nullptr, nullptr, nullptr, wide, nullptr), Error);
  EXPECT_THROW(max_pool2d_backward<float>(nullptr, nullptr, nullptr, wide, false, nullptr), Error);
  EXPECT_NO_THROW(avg_pool2d_forward<float>(nullptr, nullptr, wide, nullptr));
}

// Adaptive average pooling adds in the CPU's order: equal bit for bit, in both write modes. Overlapping
// bins, upsampling, 1x1 -> 7x7, and shapes of more than one block of outputs and inputs.
TEST(CudaKernels, AdaptiveAvgPool2d) {
  CRUMB_REQUIRE_GPU();
  for (const cpu::AdaptivePool2dShape& s : std::vector<cpu::AdaptivePool2dShape>{
           {2, 2, 7, 5, 3, 2}, {2, 2, 2, 3, 5, 4}, {2, 3, 1, 1, 7, 7}, {3, 5, 13, 11, 7, 3}, {2, 7, 9, 9, 4, 6}}) {
    const std::string at = " n=" + std::to_string(s.n) + " c=" + std::to_string(s.c) + " " + std::to_string(s.h) + "x" +
                           std::to_string(s.w) + " -> " + std::to_string(s.h_out) + "x" + std::to_string(s.w_out);
    const std::size_t in = std::size_t(s.n) * s.c * s.h * s.w, out = std::size_t(s.n) * s.c * s.h_out * s.w_out;
    const Floats x = random_floats(in, 1), dy = random_floats(out, 2);
    const DeviceArray<float> dev_x(x), dev_dy(dy);
    check_against_cpu(
        {out}, false, [&](auto& o, bool) { cpu::adaptive_avg_pool2d_forward(o[0], x.data(), s); },
        [&](auto& o, bool) { adaptive_avg_pool2d_forward(o[0], dev_x.get(), s, nullptr); },
        "adaptive_avg_pool2d_forward" + at, /*exact=*/true);
    check_against_cpu(
        {in}, true, [&](auto& o, bool acc) { cpu::adaptive_avg_pool2d_backward(o[0], dy.data(), s, acc); },
        [&](auto& o, bool acc) { adaptive_avg_pool2d_backward(o[0], dev_dy.get(), s, acc, nullptr); },
        "adaptive_avg_pool2d_backward" + at, /*exact=*/true);
  }
}

// Dropout draws the CPU's mask (integer hashing only): equal bit for bit when writing (also in place), for
// a micro-batch that does not start at the batch's first sample.
TEST(CudaKernels, DropoutMatchesTheCpuMask) {
  CRUMB_REQUIRE_GPU();
  const RandomKey key{0x1234567890abcdefULL, 13};
  const DeviceArray<RandomKey> dev_key(std::vector<RandomKey>{key});
  const uint64_t layer = 99;
  const uint32_t threshold = static_cast<uint32_t>(0.4 * 4294967296.0);
  const float scale = static_cast<float>(1.0 / 0.6);
  for (const auto& [n, per_sample] : std::vector<std::pair<int, std::size_t>>{{3, 10}, {5, 77}, {2, 1000}}) {
    const std::string at = " n=" + std::to_string(n) + " per_sample=" + std::to_string(per_sample);
    const std::size_t count = std::size_t(n) * per_sample;
    const Floats x = random_floats(count, 1);
    const DeviceArray<float> dev_x(x);
    const auto cpu_run = [&](const std::vector<float*>& o, bool acc) {
      cpu::dropout<float>(o[0], x.data(), n, per_sample, key, layer, threshold, scale, acc);
    };
    const auto gpu_run = [&](const std::vector<float*>& o, bool acc) {
      dropout(o[0], dev_x.get(), n, per_sample, dev_key.get(), layer, threshold, scale, acc, nullptr);
    };
    check_against_cpu({count}, false, cpu_run, gpu_run, "dropout" + at, /*exact=*/true);
    // += within rounding only: GCC contracts the CPU's y += x * scale into an fma (-march=native), nvcc
    // does not (the product sits behind the mask's select).
    check_against_cpu({count}, true, cpu_run, gpu_run, "dropout" + at);
    Floats y = x;
    cpu::dropout<float>(y.data(), y.data(), n, per_sample, key, layer, threshold, scale, false);
    DeviceArray<float> dev_y(x);
    dropout(dev_y.get(), dev_y.get(), n, per_sample, dev_key.get(), layer, threshold, scale, false, nullptr);
    expect_bits(dev_y.download(), y, "dropout in place" + at);
  }
}

// ---- normalisation

// Inputs offset by channel and by sample, so that statistics taken over the wrong values show.
Floats norm_input(int n, int c, int hw, unsigned seed) {
  Floats x = random_floats(std::size_t(n) * c * hw, seed, -2, 3);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] += 5.0f * float((i / hw) % c) + 0.5f * float(i / (std::size_t(c) * hw));
  return x;
}

// [n, c, hw, group]: ragged groups, the whole batch as one group, 1x1 feature maps, groups of one sample,
// a group longer than the batch; channel runs longer than a block (8 x 49, 2 x 700); a group's channel
// split over several blocks: two, the ragged last group's filling only the first; odd feature maps, so
// splits end inside one and values are read one at a time; fifteen.
const std::vector<cpu::BatchNormShape> kBatchNormShapes = {
    {5, 3, 12, 2},  {4, 2, 12, 4},    {6, 4, 1, 3},     {3, 3, 9, 1},
    {37, 5, 49, 8}, {2, 3, 700, 32}, {10, 3, 3000, 4}, {7, 2, 4999, 3}, {3, 2, 40000, 3}};

// Device scratch for a BatchNorm launcher: as many bytes as its workspace function asks for.
struct Scratch {
  explicit Scratch(std::size_t size) : bytes(size), array(size) {}
  std::size_t bytes;
  DeviceArray<unsigned char> array;
};

std::string norm_name(int n, int c, int hw, const char* groups, int g) {
  return " n=" + std::to_string(n) + " c=" + std::to_string(c) + " hw=" + std::to_string(hw) + " " + groups + "=" +
         std::to_string(g);
}

TEST(CudaKernels, BatchNormForwardTrain) {
  CRUMB_REQUIRE_GPU();
  for (const cpu::BatchNormShape& s : kBatchNormShapes) {
    const std::size_t count = std::size_t(s.n) * s.c * s.hw, stats_count = std::size_t(2) * s.groups() * s.c;
    const Floats w = random_floats(s.c, 2), b = random_floats(s.c, 3);
    const Floats mean0 = random_floats(s.c, 4), var0 = random_floats(s.c, 5, 0.5f, 2.0f);
    const DeviceArray<float> dev_w(w), dev_b(b);
    // Two micro-batches: the second merges into the first's moments, or updates the running statistics again.
    const Floats xs[2] = {norm_input(s.n, s.c, s.hw, 1), norm_input(s.n, s.c, s.hw, 11)};
    for (bool deferred : {true, false}) {
      const std::string at = norm_name(s.n, s.c, s.hw, "group", s.group) + (deferred ? " deferred" : " per group");
      std::vector<double> moments(3 * std::size_t(s.c), 0.0);
      Floats mean = mean0, var = var0;
      int64_t tracked = 7;
      DeviceArray<double> dev_moments(moments);
      DeviceArray<float> dev_mean(mean), dev_var(var);
      DeviceArray<int64_t> dev_tracked(std::vector<int64_t>{tracked});
      const Scratch scratch(batch_norm_forward_train_workspace(s));
      for (const Floats& x : xs) {
        Floats y(count), stats(stats_count);
        cpu::batch_norm_forward_train(y.data(), stats.data(), x.data(), w.data(), b.data(), s, 1e-5,
                                      deferred ? moments.data() : nullptr, deferred ? nullptr : mean.data(),
                                      deferred ? nullptr : var.data(), &tracked, 0.1);
        const DeviceArray<float> dev_x(x);
        DeviceArray<float> dev_y(Floats(count, kNaN)), dev_stats(Floats(stats_count, kNaN));
        batch_norm_forward_train(dev_y.get(), dev_stats.get(), dev_x.get(), dev_w.get(), dev_b.get(), s, 1e-5,
                                 deferred ? dev_moments.get() : nullptr, deferred ? nullptr : dev_mean.get(),
                                 deferred ? nullptr : dev_var.get(), dev_tracked.get(), 0.1, scratch.array.get(),
                                 scratch.bytes, nullptr);
        expect_close(dev_y.download(), y, "batch_norm_forward_train y" + at);
        expect_close(dev_stats.download(), stats, "batch_norm_forward_train stats" + at);
        // A recomputation (engine/strategy/recompute.h) from the stored statistics: the forward's bits.
        DeviceArray<float> dev_applied(Floats(count, kNaN));
        batch_norm_apply(dev_applied.get(), dev_x.get(), dev_w.get(), dev_b.get(), dev_stats.get(), s, nullptr);
        expect_bits(dev_applied.download(), dev_y.download(), "batch_norm_apply y" + at);
      }
      if (deferred) {
        // Both sides add in double: they differ in the last bits of a double only.
        test::expect_close(dev_moments.download(), moments, 1e-9, "moments" + at, test::rms_at_least_1(moments));
        cpu::batch_norm_commit(mean.data(), var.data(), &tracked, moments.data(), s.c, 0.1);
        batch_norm_commit(dev_mean.get(), dev_var.get(), dev_tracked.get(), dev_moments.get(), s.c, 0.1, nullptr);
      }
      expect_close(dev_mean.download(), mean, "running_mean" + at);
      expect_close(dev_var.download(), var, "running_var" + at);
      EXPECT_EQ(dev_tracked.download(), std::vector<int64_t>{tracked}) << "num_batches_tracked" << at;
    }
  }
}

TEST(CudaKernels, BatchNormFrozenAndBackward) {
  CRUMB_REQUIRE_GPU();
  for (const cpu::BatchNormShape& s : kBatchNormShapes) {
    const std::string at = norm_name(s.n, s.c, s.hw, "group", s.group);
    const std::size_t c = s.c, count = std::size_t(s.n) * s.c * s.hw, stats_count = std::size_t(2) * s.groups() * s.c;
    const Floats x = norm_input(s.n, s.c, s.hw, 1), w = random_floats(c, 2), b = random_floats(c, 3);
    const Floats mean = random_floats(c, 4), var = random_floats(c, 5, 0.5f, 2.0f), dy = random_floats(count, 6);
    const DeviceArray<float> dev_x(x), dev_w(w), dev_b(b), dev_mean(mean), dev_var(var), dev_dy(dy);
    check_against_cpu(
        {count, stats_count}, false,
        [&](auto& o, bool) {
          cpu::batch_norm_forward_frozen(o[0], o[1], x.data(), w.data(), b.data(), mean.data(), var.data(), s, 1e-5);
        },
        [&](auto& o, bool) {
          batch_norm_forward_frozen(o[0], o[1], dev_x.get(), dev_w.get(), dev_b.get(), dev_mean.get(), dev_var.get(),
                                    s, 1e-5, nullptr);
        },
        "batch_norm_forward_frozen" + at);
    {  // A frozen layer recomputed from the statistics it stored: the forward's bits.
      DeviceArray<float> dev_y(Floats(count, kNaN)), dev_stats(Floats(stats_count, kNaN)),
          dev_applied(Floats(count, kNaN));
      batch_norm_forward_frozen(dev_y.get(), dev_stats.get(), dev_x.get(), dev_w.get(), dev_b.get(), dev_mean.get(),
                                dev_var.get(), s, 1e-5, nullptr);
      batch_norm_apply(dev_applied.get(), dev_x.get(), dev_w.get(), dev_b.get(), dev_stats.get(), s, nullptr);
      expect_bits(dev_applied.download(), dev_y.download(), "batch_norm_apply of a frozen layer" + at);
    }
    check_against_cpu(
        {count}, false,
        [&](auto& o, bool) {
          cpu::batch_norm_forward_frozen<float>(o[0], nullptr, x.data(), w.data(), b.data(), mean.data(), var.data(),
                                                s, 1e-5);
        },
        [&](auto& o, bool) {
          batch_norm_forward_frozen(o[0], nullptr, dev_x.get(), dev_w.get(), dev_b.get(), dev_mean.get(),
                                    dev_var.get(), s, 1e-5, nullptr);
        },
        "batch_norm_forward_frozen without stats" + at);

    // The backward of the training forward's statistics (neither running-statistics rule).
    Floats y(count), stats(stats_count);
    int64_t tracked = 0;
    cpu::batch_norm_forward_train<float>(y.data(), stats.data(), x.data(), w.data(), b.data(), s, 1e-5, nullptr,
                                         nullptr, nullptr, &tracked, 0.1);
    const DeviceArray<float> dev_stats(stats);
    const Scratch scratch(batch_norm_backward_workspace(s));
    for (bool batch_stats : {true, false}) {
      const std::string mode = at + (batch_stats ? " batch statistics" : " frozen");
      check_against_cpu(
          {c, c, count}, true,
          [&](auto& o, bool acc) {
            cpu::batch_norm_backward(o[0], o[1], o[2], dy.data(), x.data(), w.data(), stats.data(), s, batch_stats,
                                     acc);
          },
          [&](auto& o, bool acc) {
            batch_norm_backward(o[0], o[1], o[2], dev_dy.get(), dev_x.get(), dev_w.get(), dev_stats.get(), s,
                                batch_stats, acc, scratch.array.get(), scratch.bytes, nullptr);
          },
          "batch_norm_backward" + mode);
      check_against_cpu(
          {c, c}, true,
          [&](auto& o, bool acc) {
            cpu::batch_norm_backward<float>(o[0], o[1], nullptr, dy.data(), x.data(), w.data(), stats.data(), s,
                                            batch_stats, acc);
          },
          [&](auto& o, bool acc) {
            batch_norm_backward<float>(o[0], o[1], nullptr, dev_dy.get(), dev_x.get(), dev_w.get(), dev_stats.get(), s,
                                       batch_stats, acc, scratch.array.get(), scratch.bytes, nullptr);
          },
          "batch_norm_backward without dx" + mode);
    }
  }
}

TEST(CudaKernels, GroupNorm) {
  CRUMB_REQUIRE_GPU();
  // Two groups, one channel per group (InstanceNorm), one group (LayerNorm), rows longer than a block.
  for (const cpu::GroupNormShape& s : std::vector<cpu::GroupNormShape>{
           {3, 4, 9, 2}, {2, 3, 8, 3}, {2, 3, 8, 1}, {5, 8, 49, 4}, {2, 6, 300, 1}}) {
    const std::string at = norm_name(s.n, s.c, s.hw, "groups", s.groups);
    const std::size_t c = s.c, count = std::size_t(s.n) * s.c * s.hw, stats_count = std::size_t(2) * s.n * s.groups;
    const Floats x = norm_input(s.n, s.c, s.hw, 1), w = random_floats(c, 2), b = random_floats(c, 3);
    const Floats dy = random_floats(count, 6);
    const DeviceArray<float> dev_x(x), dev_w(w), dev_b(b), dev_dy(dy);
    check_against_cpu(
        {count, stats_count}, false,
        [&](auto& o, bool) { cpu::group_norm_forward(o[0], o[1], x.data(), w.data(), b.data(), s, 1e-5); },
        [&](auto& o, bool) {
          group_norm_forward(o[0], o[1], dev_x.get(), dev_w.get(), dev_b.get(), s, 1e-5, nullptr);
        },
        "group_norm_forward" + at);
    Floats y(count), stats(stats_count);
    cpu::group_norm_forward(y.data(), stats.data(), x.data(), w.data(), b.data(), s, 1e-5);
    const DeviceArray<float> dev_stats(stats);
    check_against_cpu(
        {c, c, count}, true,
        [&](auto& o, bool acc) {
          cpu::group_norm_backward(o[0], o[1], o[2], dy.data(), x.data(), w.data(), stats.data(), s, acc);
        },
        [&](auto& o, bool acc) {
          group_norm_backward(o[0], o[1], o[2], dev_dy.get(), dev_x.get(), dev_w.get(), dev_stats.get(), s, acc,
                              nullptr);
        },
        "group_norm_backward" + at);
    check_against_cpu(
        {c, c}, true,
        [&](auto& o, bool acc) {
          cpu::group_norm_backward<float>(o[0], o[1], nullptr, dy.data(), x.data(), w.data(), stats.data(), s,
                                          acc);
        },
        [&](auto& o, bool acc) {
          group_norm_backward<float>(o[0], o[1], nullptr, dev_dy.get(), dev_x.get(), dev_w.get(), dev_stats.get(), s,
                                     acc, nullptr);
        },
        "group_norm_backward without dx" + at);
  }
}

// The training forward on the device with deferred moments from zero: writes y and stats, returns the
// moments.
template <class T>
std::vector<double> forward_with_moments(T* y, float* stats, const T* x, const float* w, const float* b,
                                         const cpu::BatchNormShape& s) {
  DeviceArray<double> moments(std::vector<double>(3 * std::size_t(s.c), 0.0));
  DeviceArray<int64_t> tracked(std::vector<int64_t>{0});
  const Scratch scratch(batch_norm_forward_train_workspace(s));
  batch_norm_forward_train(y, stats, x, w, b, s, 1e-5, moments.get(), nullptr, nullptr, tracked.get(), 0.1,
                           scratch.array.get(), scratch.bytes, nullptr);
  return moments.download();
}

// [n, c, hw] values from NCHW to NHWC (back = false) or back.
Floats relayout(const Floats& v, int n, int c, int hw, bool back) {
  Floats out(v.size());
  for (int i = 0; i < n; ++i)
    for (int ch = 0; ch < c; ++ch)
      for (int p = 0; p < hw; ++p) {
        const std::size_t nchw = (std::size_t(i) * c + ch) * hw + p, nhwc = (std::size_t(i) * hw + p) * c + ch;
        out[back ? nchw : nhwc] = v[back ? nhwc : nchw];
      }
  return out;
}

// BatchNorm on NHWC (channel tiles of 32 lanes, elementwise passes over channel packs) against the CPU on
// NCHW: a ragged last tile and group, several splits per group over two tiles, an odd channel count.
TEST(CudaKernels, BatchNormNhwc) {
  CRUMB_REQUIRE_GPU();
  for (cpu::BatchNormShape s : std::vector<cpu::BatchNormShape>{{6, 40, 49, 4}, {4, 64, 300, 4}, {9, 33, 100, 2}}) {
    const std::string at = norm_name(s.n, s.c, s.hw, "group", s.group) + " NHWC";
    const std::size_t c = s.c, count = std::size_t(s.n) * s.c * s.hw, stats_count = std::size_t(2) * s.groups() * s.c;
    const Floats x = norm_input(s.n, s.c, s.hw, 1), w = random_floats(c, 2), b = random_floats(c, 3),
                 dy = random_floats(count, 6);
    Floats y(count), stats(stats_count), dw(c), db(c), dx(count);
    std::vector<double> moments(3 * c, 0.0);
    int64_t tracked = 0;
    cpu::batch_norm_forward_train<float>(y.data(), stats.data(), x.data(), w.data(), b.data(), s, 1e-5, moments.data(),
                                         nullptr, nullptr, &tracked, 0.1);
    cpu::batch_norm_backward<float>(dw.data(), db.data(), dx.data(), dy.data(), x.data(), w.data(), stats.data(), s,
                                    true, false);
    s.layout = Layout::NHWC;
    const DeviceArray<float> dev_x(relayout(x, s.n, s.c, s.hw, false)), dev_dy(relayout(dy, s.n, s.c, s.hw, false)),
        dev_w(w), dev_b(b);
    DeviceArray<float> dev_y(Floats(count, kNaN)), dev_stats(Floats(stats_count, kNaN)), dev_dx(Floats(count, kNaN)),
        dev_dw(Floats(c, kNaN)), dev_db(Floats(c, kNaN)), dev_applied(Floats(count, kNaN));
    test::expect_close(forward_with_moments(dev_y.get(), dev_stats.get(), dev_x.get(), dev_w.get(), dev_b.get(), s),
                       moments, 1e-9, "moments" + at, test::rms_at_least_1(moments));
    expect_close(relayout(dev_y.download(), s.n, s.c, s.hw, true), y, "batch_norm_forward_train y" + at);
    expect_close(dev_stats.download(), stats, "batch_norm_forward_train stats" + at);
    const Scratch scratch(batch_norm_backward_workspace(s));
    batch_norm_apply(dev_applied.get(), dev_x.get(), dev_w.get(), dev_b.get(), dev_stats.get(), s, nullptr);
    expect_bits(dev_applied.download(), dev_y.download(), "batch_norm_apply y" + at);
    batch_norm_backward(dev_dw.get(), dev_db.get(), dev_dx.get(), dev_dy.get(), dev_x.get(), dev_w.get(),
                        dev_stats.get(), s, true, false, scratch.array.get(), scratch.bytes, nullptr);
    expect_close(relayout(dev_dx.download(), s.n, s.c, s.hw, true), dx, "batch_norm_backward dx" + at);
    expect_close(dev_dw.download(), dw, "batch_norm_backward dw" + at);
    expect_close(dev_db.download(), db, "batch_norm_backward db" + at);
  }
}

// The gradient of an empty batch is zero: write mode stores it, accumulate mode leaves the sums alone.
TEST(CudaKernels, NormEmptyBatchGradients) {
  CRUMB_REQUIRE_GPU();
  const Floats sums = random_floats(3, 1);
  for (bool acc : {false, true}) {
    DeviceArray<float> dw(acc ? sums : Floats(3, kNaN)), db(acc ? sums : Floats(3, kNaN));
    batch_norm_backward<float>(dw.get(), db.get(), nullptr, nullptr, nullptr, nullptr, nullptr, {0, 3, 4, 0}, true, acc,
                               nullptr, 0, nullptr);
    expect_same(dw.download(), acc ? sums : Floats(3, 0.0f), "batch_norm_backward dw, empty batch");
    expect_same(db.download(), acc ? sums : Floats(3, 0.0f), "batch_norm_backward db, empty batch");
    dw.upload(acc ? sums : Floats(3, kNaN));
    db.upload(acc ? sums : Floats(3, kNaN));
    group_norm_backward<float>(dw.get(), db.get(), nullptr, nullptr, nullptr, nullptr, nullptr, {0, 3, 4, 3}, acc,
                               nullptr);
    expect_same(dw.download(), acc ? sums : Floats(3, 0.0f), "group_norm_backward dw, empty batch");
    expect_same(db.download(), acc ? sums : Floats(3, 0.0f), "group_norm_backward db, empty batch");
  }
}

// The launchers check their shapes before touching a device, and an empty batch's forward launches
// nothing, so these run everywhere. Each failure must be the check's own (without a device, a launch
// would throw too).
TEST(CudaNormChecks, RejectBadShapes) {
  auto bn_train = [](const cpu::BatchNormShape& s, float* running_mean = nullptr) {
    return message_of([&] {
      batch_norm_forward_train<float>(nullptr, nullptr, nullptr, nullptr, nullptr, s, 1e-5, nullptr, running_mean,
                                      nullptr, nullptr, 0.1, nullptr, 0, nullptr);
    });
  };
  auto has = [](const std::string& msg, const char* part) { return msg.find(part) != std::string::npos; };
  EXPECT_TRUE(has(bn_train({2, 3, 4, 0}), "bad group")) << "group 0 with samples";
  EXPECT_TRUE(has(bn_train({-1, 3, 4, 2}), "bad shape")) << "negative batch";
  EXPECT_TRUE(has(bn_train({2, 3, 0, 2}), "bad shape")) << "empty feature map";
  float running_mean = 0;
  EXPECT_TRUE(has(bn_train({2, 3, 4, 2}, &running_mean), "go together")) << "running_mean without running_var";
  const std::string frozen = message_of([] {
    batch_norm_forward_frozen<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, {2, 3, 4, -1}, 1e-5,
                              nullptr);
  });
  EXPECT_TRUE(has(frozen, "bad group")) << frozen;
  const std::string backward = message_of([] {
    batch_norm_backward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, {2, -3, 4, 2}, true,
                               false, nullptr, 0, nullptr);
  });
  EXPECT_TRUE(has(backward, "bad shape")) << backward;
  const std::string gn = message_of([] {
    group_norm_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, {2, 3, 4, 2}, 1e-5, nullptr);
  });
  EXPECT_TRUE(has(gn, "2 groups do not divide 3 channels")) << gn;
  const std::string gn_bwd = message_of([] {
    group_norm_backward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, {2, 4, 4, 0}, false,
                               nullptr);
  });
  EXPECT_TRUE(has(gn_bwd, "do not divide")) << gn_bwd;

  // An empty batch: nothing to normalise, and no group to count (its group may be 0: the whole batch).
  EXPECT_EQ(bn_train({0, 3, 4, 0}), "(no crumb::Error thrown)");
  EXPECT_NO_THROW(batch_norm_forward_frozen<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                            {0, 3, 4, 0}, 1e-5, nullptr));
  EXPECT_NO_THROW(group_norm_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, {0, 4, 4, 2}, 1e-5, nullptr));
}

// ---- library-backed ops: cuBLAS linear, cuDNN conv

class CudaLibraryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CRUMB_REQUIRE_GPU();
    CRUMB_CUBLAS_CHECK(cublasCreate(&blas_));
#if CRUMB_HAVE_CUDNN
    CRUMB_CUDNN_CHECK(cudnnCreate(&dnn_));
#endif
  }
  void TearDown() override {
    if (blas_) cublasDestroy(blas_);
#if CRUMB_HAVE_CUDNN
    if (dnn_) cudnnDestroy(dnn_);
#endif
  }

  cublasHandle_t blas_ = nullptr;
#if CRUMB_HAVE_CUDNN
  cudnnHandle_t dnn_ = nullptr;
#endif
};

TEST_F(CudaLibraryTest, Linear) {
  // Tiny, ragged, and LeNet's classifier layers.
  for (auto [n, in, out] : {std::tuple{3, 5, 4}, {1, 1, 1}, {37, 33, 19}, {64, 400, 120}, {64, 84, 10}}) {
    const std::string at = " n=" + std::to_string(n) + " in=" + std::to_string(in) + " out=" + std::to_string(out);
    const Floats x = random_floats(std::size_t(n) * in, 1), w = random_floats(std::size_t(out) * in, 2),
                 b = random_floats(out, 3), dy = random_floats(std::size_t(n) * out, 4);
    const DeviceArray<float> dev_x(x), dev_w(w), dev_b(b), dev_dy(dy);
    const std::size_t y_size = std::size_t(n) * out, x_size = std::size_t(n) * in, w_size = std::size_t(out) * in;
    std::vector<float> ws(cpu::linear_forward_workspace(n, in, out)), wsd(cpu::linear_backward_data_workspace(in, out));
    for (bool bias : {true, false}) {
      check_against_cpu(
          {y_size}, false,
          [&](auto& o, bool) { cpu::linear_forward(o[0], x.data(), w.data(), bias ? b.data() : nullptr, n, in, out, ws.data()); },
          [&](auto& o, bool) {
            linear_forward(blas_, o[0], dev_x.get(), dev_w.get(), bias ? dev_b.get() : nullptr, n, in, out);
          },
          std::string("linear_forward") + (bias ? "" : " (no bias)") + at);
      check_against_cpu(
          bias ? std::vector<std::size_t>{w_size, std::size_t(out)} : std::vector<std::size_t>{w_size}, true,
          [&](auto& o, bool acc) {
            cpu::linear_backward_weight(o[0], bias ? o[1] : nullptr, dy.data(), x.data(), n, in, out, acc);
          },
          [&](auto& o, bool acc) {
            linear_backward_weight(blas_, o[0], bias ? o[1] : nullptr, dev_dy.get(), dev_x.get(), n, in, out, acc);
          },
          std::string("linear_backward_weight") + (bias ? "" : " (no db)") + at);
    }
    check_against_cpu(
        {x_size}, true,
        [&](auto& o, bool acc) { cpu::linear_backward_data(o[0], dy.data(), w.data(), n, in, out, wsd.data(), acc); },
        [&](auto& o, bool acc) { linear_backward_data(blas_, o[0], dev_dy.get(), dev_w.get(), n, in, out, acc); },
        "linear_backward_data" + at);
  }
}

#if CRUMB_HAVE_CUDNN

static_assert(!std::is_copy_constructible_v<ConvPlan> && std::is_nothrow_move_constructible_v<ConvPlan> &&
              std::is_nothrow_move_assignable_v<ConvPlan>);

cpu::Conv2dShape conv_shape(int n, int c_in, int h, int w, int c_out, int kh, int kw, int sh, int sw, int ph, int pw) {
  return {n, c_in, h, w, c_out, kh, kw, sh, sw, ph, pw, (h + 2 * ph - kh) / sh + 1, (w + 2 * pw - kw) / sw + 1};
}

// A layer's three passes, one plan each, as the engine builds them.
struct ConvPlans {
  ConvPlans(cudnnHandle_t handle, const cpu::Conv2dShape& s, std::size_t limit)
      : fwd(handle, s, ConvPass::Forward, limit),
        bwd_data(handle, s, ConvPass::BackwardData, limit),
        bwd_filter(handle, s, ConvPass::BackwardFilter, limit) {}
  void set_batch(cudnnHandle_t handle, int n) {
    for (ConvPlan* p : {&fwd, &bwd_data, &bwd_filter}) p->set_batch(handle, n);
  }
  ConvPlan fwd, bwd_data, bwd_filter;
};

// All three passes at the plans' current shape against the CPU kernels, each with exactly its planned
// workspace.
void check_conv(cudnnHandle_t handle, ConvPlans& plans) {
  const cpu::Conv2dShape& s = plans.fwd.shape();
  const std::string at = " n=" + std::to_string(s.n) + " c_in=" + std::to_string(s.c_in) + " " + std::to_string(s.h) +
                         "x" + std::to_string(s.w) + " c_out=" + std::to_string(s.c_out) +
                         " k=" + std::to_string(s.kh) + " stride=" + std::to_string(s.stride_h) +
                         " pad=" + std::to_string(s.pad_h);
  const std::size_t w_size = std::size_t(s.c_out) * s.c_in * s.kh * s.kw;
  const Floats x = random_floats(s.in_count(), 1), w = random_floats(w_size, 2), b = random_floats(s.c_out, 3),
               dy = random_floats(s.out_count(), 4);
  const DeviceArray<float> dev_x(x), dev_w(w), dev_b(b), dev_dy(dy);
  DeviceArray<unsigned char> ws_fwd(plans.fwd.workspace_bytes()), ws_data(plans.bwd_data.workspace_bytes()),
      ws_filter(plans.bwd_filter.workspace_bytes());
  Floats cpu_ws(std::max({cpu::conv2d_forward_workspace(s), cpu::conv2d_backward_data_workspace(s),
                          cpu::conv2d_backward_weight_workspace(s)}));
  for (bool bias : {true, false}) {
    check_against_cpu(
        {std::size_t(s.out_count())}, false,
        [&](auto& o, bool) {
          cpu::conv2d_forward(o[0], x.data(), w.data(), bias ? b.data() : nullptr, s, cpu_ws.data());
        },
        [&](auto& o, bool) {
          conv_forward(handle, plans.fwd, o[0], dev_x.get(), dev_w.get(), bias ? dev_b.get() : nullptr, ws_fwd.get(),
                       plans.fwd.workspace_bytes());
        },
        std::string("conv_forward") + (bias ? "" : " (no bias)") + at);
    check_against_cpu(
        bias ? std::vector<std::size_t>{w_size, std::size_t(s.c_out)} : std::vector<std::size_t>{w_size}, true,
        [&](auto& o, bool acc) {
          cpu::conv2d_backward_weight(o[0], bias ? o[1] : nullptr, dy.data(), x.data(), s, cpu_ws.data(), acc);
        },
        [&](auto& o, bool acc) {
          conv_backward_filter(handle, plans.bwd_filter, o[0], bias ? o[1] : nullptr, dev_dy.get(), dev_x.get(),
                               ws_filter.get(), plans.bwd_filter.workspace_bytes(), acc);
        },
        std::string("conv_backward_filter") + (bias ? "" : " (no db)") + at);
  }
  check_against_cpu(
      {std::size_t(s.in_count())}, true,
      [&](auto& o, bool acc) { cpu::conv2d_backward_data(o[0], dy.data(), w.data(), s, cpu_ws.data(), acc); },
      [&](auto& o, bool acc) {
        conv_backward_data(handle, plans.bwd_data, o[0], dev_dy.get(), dev_w.get(), ws_data.get(),
                           plans.bwd_data.workspace_bytes(), acc);
      },
      "conv_backward_data" + at);
}

TEST_F(CudaLibraryTest, Conv2d) {
  constexpr std::size_t kWorkspaceLimit = std::size_t{64} << 20;
  for (const cpu::Conv2dShape& s : {
           conv_shape(8, 1, 28, 28, 6, 5, 5, 1, 1, 2, 2),      // LeNet conv1
           conv_shape(8, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0),     // LeNet conv2
           conv_shape(5, 3, 9, 8, 4, 3, 3, 2, 2, 1, 1),        // odd sizes, stride 2, pad 1
           conv_shape(64, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1),   // cnn's second conv at a real batch
       }) {
    ConvPlans plans(dnn_, s, kWorkspaceLimit);
    check_conv(dnn_, plans);
    // The ragged last micro-batch, then back to the full one.
    plans.set_batch(dnn_, 3);
    EXPECT_EQ(plans.fwd.shape().n, 3);
    check_conv(dnn_, plans);
    plans.set_batch(dnn_, s.n);
    check_conv(dnn_, plans);
    EXPECT_THROW(plans.fwd.set_batch(dnn_, s.n + 1), Error);
  }
}

// No workspace: every pass must still find an algorithm (cuDNN always has a zero-workspace one), and every
// ragged batch must fit in what was planned.
TEST_F(CudaLibraryTest, Conv2dWithoutWorkspace) {
  const cpu::Conv2dShape s = conv_shape(16, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0);
  ConvPlans plans(dnn_, s, 0);
  EXPECT_EQ(plans.fwd.workspace_bytes() + plans.bwd_data.workspace_bytes() + plans.bwd_filter.workspace_bytes(), 0u);
  for (int n : {16, 7, 1, 16}) {
    plans.set_batch(dnn_, n);
    check_conv(dnn_, plans);
  }
}

#endif  // CRUMB_HAVE_CUDNN

// ---- 16-bit storage (bf16, fp16): every kernel of a 16-bit graph's CUDA rows against the CPU's float32
// kernel run on the same 16-bit values, widened. Kernels that compute in float32 in the CPU's order and
// round once (the maps, pooling, dropout, the bias add) must give the CPU's float result rounded to T,
// bit for bit; reductions and library calls that add in another order, within one step of T's rounding;
// float32 outputs (parameter gradients, statistics) within float rounding, which a rounding to 16 bits
// anywhere on their way would exceed.

template <class T> std::vector<T> narrow(const Floats& x) {
  std::vector<T> out(x.size());
  std::transform(x.begin(), x.end(), out.begin(), [](float v) { return from_float<T>(v); });
  return out;
}
template <class T> Floats widen(const std::vector<T>& x) {
  Floats out(x.size());
  std::transform(x.begin(), x.end(), out.begin(), [](T v) { return to_float(v); });
  return out;
}
// x as T holds it.
template <class T> Floats rounded(const Floats& x) { return widen(narrow<T>(x)); }
// The encodings, to compare (and print) bit for bit.
template <class T> std::vector<uint16_t> bits(const std::vector<T>& x) {
  std::vector<uint16_t> out(x.size());
  std::transform(x.begin(), x.end(), out.begin(), [](T v) { return v.bits; });
  return out;
}

// The spacing of T's values relative to their size, at its widest: 2^-7 for bf16 (8 significant bits),
// 2^-10 for fp16 (11).
template <class T> constexpr double kUlp = std::is_same_v<T, bf16> ? 1.0 / 128 : 1.0 / 1024;

// Bit for bit, except that any NaN matches any NaN: a NaN's sign and payload mean nothing, and CUDA's
// conversions write 0x7FFF where the CPU's keep the sign of a quiet NaN.
template <class T> bool same_half(uint16_t got, uint16_t want) {
  constexpr uint16_t inf = std::is_same_v<T, bf16> ? 0x7F80 : 0x7C00;
  auto nan = [](uint16_t v) { return (v & 0x7FFF) > inf; };
  return got == want || (nan(got) && nan(want));
}

template <class T> using HalfRun = std::function<void(const std::vector<T*>&, bool accumulate)>;

// check_against_cpu for 16-bit outputs: each pre-filled with NaN (write mode) or the same random 16-bit
// values on both sides (accumulate), the CPU's as floats. tol 0: the device's must be the CPU's float
// result rounded to T, bit for bit (any NaN for a NaN); else within tol * (RMS + |want|) of it.
template <class T> void check_half(const std::vector<std::size_t>& sizes, bool has_accumulate, const Run& cpu,
                                   const HalfRun<T>& gpu, const std::string& what, double tol) {
  for (bool accumulate : {false, true}) {
    if (accumulate && !has_accumulate) break;
    std::vector<Floats> host;
    std::vector<std::unique_ptr<DeviceArray<T>>> device;
    std::vector<float*> host_ptrs;
    std::vector<T*> device_ptrs;
    for (std::size_t o = 0; o < sizes.size(); ++o) {
      host.push_back(accumulate ? rounded<T>(random_floats(sizes[o], 100 + unsigned(o))) : Floats(sizes[o], kNaN));
      device.push_back(std::make_unique<DeviceArray<T>>(narrow<T>(host.back())));
      host_ptrs.push_back(host[o].data());
      device_ptrs.push_back(device[o]->get());
    }
    cpu(host_ptrs, accumulate);
    gpu(device_ptrs, accumulate);
    for (std::size_t o = 0; o < sizes.size(); ++o) {
      const std::string name = what + " output " + std::to_string(o) + (accumulate ? " (+=)" : " (=)");
      if (tol == 0) {
        test::expect_each(bits(device[o]->download()), bits(narrow<T>(host[o])), name, same_half<T>);
      } else {
        test::expect_close(widen(device[o]->download()), host[o], tol, name, test::rms_at_least_1(host[o]));
      }
    }
  }
}

template <class T> class CudaHalf : public ::testing::Test {};
using HalfTypes = ::testing::Types<bf16, f16>;
class HalfName {
 public:
  template <class T> static std::string GetName(int) { return std::is_same_v<T, bf16> ? "bf16" : "fp16"; }
};
TYPED_TEST_SUITE(CudaHalf, HalfTypes, HalfName);

TYPED_TEST(CudaHalf, Elementwise) {
  using T = TypeParam;
  CRUMB_REQUIRE_GPU();
  // Neither count is a multiple of a 16-byte pack or of a block; the offset views are not 16-byte
  // aligned, so they take the element-by-element path.
  for (std::size_t count : {std::size_t{37}, std::size_t{100003}}) {
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      const std::size_t n = count - offset;
      const Floats x = rounded<T>(random_floats(count, 1)), a = rounded<T>(random_floats(count, 2)),
                   dy = rounded<T>(random_floats(count, 3));
      const DeviceArray<T> dev_x(narrow<T>(x)), dev_a(narrow<T>(a)), dev_dy(narrow<T>(dy));
      const std::string at = " count=" + std::to_string(count) + " offset=" + std::to_string(offset);
      check_half<T>(
          {n}, false, [&](auto& o, bool) { cpu::relu_forward(o[0], x.data() + offset, n); },
          [&](auto& o, bool) { relu_forward(o[0], dev_x.get() + offset, n, nullptr); }, "relu_forward" + at, 0);
      // y = x: ReLU's backward reads the forward's output, here any values of both signs.
      check_half<T>(
          {n}, true,
          [&](auto& o, bool acc) { cpu::relu_backward(o[0], dy.data() + offset, x.data() + offset, n, acc); },
          [&](auto& o, bool acc) { relu_backward(o[0], dev_dy.get() + offset, dev_x.get() + offset, n, acc, nullptr); },
          "relu_backward" + at, 0);
      check_half<T>(
          {n}, false, [&](auto& o, bool) { cpu::add_forward(o[0], x.data() + offset, a.data() + offset, n); },
          [&](auto& o, bool) { add_forward(o[0], dev_x.get() + offset, dev_a.get() + offset, n, nullptr); },
          "add_forward" + at, 0);
      check_half<T>(
          {n}, true, [&](auto& o, bool acc) { cpu::copy_or_accumulate(o[0], x.data() + offset, n, acc); },
          [&](auto& o, bool acc) { copy_or_accumulate(o[0], dev_x.get() + offset, n, acc, nullptr); },
          "copy_or_accumulate" + at, 0);
    }
  }
}

TYPED_TEST(CudaHalf, BiasAndGlobalAvgPool) {
  using T = TypeParam;
  CRUMB_REQUIRE_GPU();
  for (auto [n, c, hw] : kNchwShapes) {
    const std::size_t count = std::size_t(n) * c * hw, rows = std::size_t(n) * c;
    const Floats y0 = rounded<T>(random_floats(count, 1)), b = rounded<T>(random_floats(c, 2)),
                 dy = rounded<T>(random_floats(count, 3)), dy_rows = rounded<T>(random_floats(rows, 4));
    const DeviceArray<T> dev_b(narrow<T>(b)), dev_dy(narrow<T>(dy)), dev_dy_rows(narrow<T>(dy_rows)),
        dev_x(narrow<T>(y0));
    const std::string at = " n=" + std::to_string(n) + " c=" + std::to_string(c) + " hw=" + std::to_string(hw);
    Floats want = y0;
    for (std::size_t i = 0; i < count; ++i) want[i] += b[(i / hw) % c];
    DeviceArray<T> y(narrow<T>(y0));
    bias_add_nchw(y.get(), dev_b.get(), n, c, hw, nullptr);
    expect_bits(bits(y.download()), bits(narrow<T>(want)), "bias_add_nchw" + at);
    // The bias gradient is a parameter gradient: float32, summed from the 16-bit dy.
    check_against_cpu(
        {std::size_t(c)}, true, [&](auto& o, bool acc) { bias_backward_reference(o[0], dy, n, c, hw, acc); },
        [&](auto& o, bool acc) { bias_backward_nchw(o[0], dev_dy.get(), n, c, hw, acc, nullptr); },
        "bias_backward_nchw" + at);
    check_half<T>(
        {rows}, false, [&](auto& o, bool) { cpu::global_avg_pool_forward(o[0], y0.data(), n, c, hw); },
        [&](auto& o, bool) { global_avg_pool_forward(o[0], dev_x.get(), n, c, hw, nullptr); },
        "global_avg_pool_forward" + at, kUlp<T>);
    check_half<T>(
        {count}, true, [&](auto& o, bool acc) { cpu::global_avg_pool_backward(o[0], dy_rows.data(), n, c, hw, acc); },
        [&](auto& o, bool acc) { global_avg_pool_backward(o[0], dev_dy_rows.get(), n, c, hw, acc, nullptr); },
        "global_avg_pool_backward" + at, kUlp<T>);
  }
}

TYPED_TEST(CudaHalf, Pooling) {
  using T = TypeParam;
  CRUMB_REQUIRE_GPU();
  for (const cpu::Pool2dShape& s : kPoolShapes) {
    const std::size_t in = pool_in_count(s), out = pool_out_count(s);
    for (PoolInput kind : {PoolInput::kContinuous, PoolInput::kTiesAndNaN}) {
      const std::string at = pool_name(s) + pool_input_name(kind);
      const Floats x = rounded<T>(pool_input(s, kind));
      const DeviceArray<T> dev_x(narrow<T>(x));
      Floats y(out);
      std::vector<uint8_t> argmax(out);
      cpu::max_pool2d_forward(y.data(), argmax.data(), x.data(), s);
      DeviceArray<T> dev_y(narrow<T>(Floats(out, kNaN)));
      DeviceArray<uint8_t> dev_argmax(std::vector<uint8_t>(out, 0xff));
      max_pool2d_forward(dev_y.get(), dev_argmax.get(), dev_x.get(), s, nullptr);
      expect_bits(bits(dev_y.download()), bits(narrow<T>(y)), "max_pool2d_forward y" + at);
      EXPECT_EQ(dev_argmax.download(), argmax) << "max_pool2d_forward argmax" << at;
      check_half<T>(
          {out}, false, [&](auto& o, bool) { cpu::avg_pool2d_forward(o[0], x.data(), s); },
          [&](auto& o, bool) { avg_pool2d_forward(o[0], dev_x.get(), s, nullptr); }, "avg_pool2d_forward" + at, 0);
    }
    const Floats dy = rounded<T>(random_floats(out, 2));
    const DeviceArray<T> dev_dy(narrow<T>(dy));
    std::vector<uint8_t> argmax(out);
    Floats y(out);
    cpu::max_pool2d_forward(y.data(), argmax.data(), rounded<T>(pool_input(s, PoolInput::kTies)).data(), s);
    const DeviceArray<uint8_t> dev_argmax(argmax);
    check_half<T>(
        {in}, true, [&](auto& o, bool acc) { cpu::max_pool2d_backward(o[0], dy.data(), argmax.data(), s, acc); },
        [&](auto& o, bool acc) { max_pool2d_backward(o[0], dev_dy.get(), dev_argmax.get(), s, acc, nullptr); },
        "max_pool2d_backward" + pool_name(s), 0);
    // Fused multiply-adds on the device, fused or not on the CPU (see AvgPool2d): within rounding.
    check_half<T>(
        {in}, true, [&](auto& o, bool acc) { cpu::avg_pool2d_backward(o[0], dy.data(), s, acc); },
        [&](auto& o, bool acc) { avg_pool2d_backward(o[0], dev_dy.get(), s, acc, nullptr); },
        "avg_pool2d_backward" + pool_name(s), kUlp<T>);
  }
  const cpu::AdaptivePool2dShape s{2, 3, 13, 11, 7, 3};
  const std::size_t in = std::size_t(s.n) * s.c * s.h * s.w, out = std::size_t(s.n) * s.c * s.h_out * s.w_out;
  const Floats x = rounded<T>(random_floats(in, 1)), dy = rounded<T>(random_floats(out, 2));
  const DeviceArray<T> dev_x(narrow<T>(x)), dev_dy(narrow<T>(dy));
  check_half<T>(
      {out}, false, [&](auto& o, bool) { cpu::adaptive_avg_pool2d_forward(o[0], x.data(), s); },
      [&](auto& o, bool) { adaptive_avg_pool2d_forward(o[0], dev_x.get(), s, nullptr); }, "adaptive_avg_pool2d_forward",
      0);
  check_half<T>(
      {in}, true, [&](auto& o, bool acc) { cpu::adaptive_avg_pool2d_backward(o[0], dy.data(), s, acc); },
      [&](auto& o, bool acc) { adaptive_avg_pool2d_backward(o[0], dev_dy.get(), s, acc, nullptr); },
      "adaptive_avg_pool2d_backward", 0);
}

TYPED_TEST(CudaHalf, SoftmaxXentAndDropout) {
  using T = TypeParam;
  CRUMB_REQUIRE_GPU();
  for (auto [n, k] : {std::pair{37, 10}, {300, 1000}}) {
    const std::string at = " n=" + std::to_string(n) + " k=" + std::to_string(k);
    const std::size_t count = std::size_t(n) * k;
    const Floats z = rounded<T>(random_floats(count, 1, -5.0f, 5.0f));
    const std::vector<int32_t> labels = test::random_labels(n, k, 2);
    const DeviceArray<T> dev_z(narrow<T>(z));
    const DeviceArray<int32_t> dev_labels(labels);
    Floats probs(count);
    const double loss = cpu::softmax_xent_forward(probs.data(), z.data(), labels.data(), n, k);
    // The probabilities are float32 whatever the logits' dtype.
    DeviceArray<float> dev_probs(Floats(count, kNaN));
    DeviceArray<double> dev_loss(std::vector<double>{0.0});
    DeviceArray<unsigned long long> dev_correct(std::vector<unsigned long long>{0});
    softmax_xent_forward(dev_probs.get(), dev_z.get(), dev_labels.get(), n, k, dev_loss.get(), dev_correct.get(),
                         nullptr);
    // The loss is computed in float32 and double from the same 16-bit logits: float rounding only.
    EXPECT_NEAR(dev_loss.download()[0], loss, kTolerance * (1 + std::abs(loss))) << at;
    const Floats got_probs = dev_probs.download();
    test::expect_close(got_probs, probs, kTolerance, "softmax_xent_forward probs" + at);
    // Judged on the probabilities as stored, as the CPU judges its own.
    EXPECT_EQ(dev_correct.download()[0], unsigned(cpu::count_correct(got_probs.data(), labels.data(), n, k))) << at;
    // The backward from the stored probabilities: the CPU's float result rounded, bit for bit.
    const float scale = 1.0f / n;
    check_half<T>(
        {count}, true,
        [&](auto& o, bool acc) { cpu::softmax_xent_backward(o[0], got_probs.data(), labels.data(), n, k, scale, acc); },
        [&](auto& o, bool acc) {
          softmax_xent_backward(o[0], dev_probs.get(), dev_labels.get(), n, k, scale, acc, nullptr);
        },
        "softmax_xent_backward" + at, 0);
  }

  const RandomKey key{0x1234567890abcdefULL, 13};
  const DeviceArray<RandomKey> dev_key(std::vector<RandomKey>{key});
  const uint32_t threshold = static_cast<uint32_t>(0.4 * 4294967296.0);
  const float scale = static_cast<float>(1.0 / 0.6);
  const int n = 5;
  const std::size_t per_sample = 77, count = n * per_sample;
  const Floats x = rounded<T>(random_floats(count, 1));
  const DeviceArray<T> dev_x(narrow<T>(x));
  // Writing: the same mask and product, rounded once, bit for bit; adding: within rounding (the CPU's
  // y += x * scale may be fused, see DropoutMatchesTheCpuMask).
  for (bool acc : {false, true}) {
    check_half<T>(
        {count}, acc,
        [&](auto& o, bool a) { cpu::dropout<float>(o[0], x.data(), n, per_sample, key, 99, threshold, scale, a); },
        [&](auto& o, bool a) {
          dropout(o[0], dev_x.get(), n, per_sample, dev_key.get(), 99, threshold, scale, a, nullptr);
        },
        std::string("dropout") + (acc ? " (+=)" : ""), acc ? kUlp<T> : 0);
  }
}

TYPED_TEST(CudaHalf, Normalisation) {
  using T = TypeParam;
  CRUMB_REQUIRE_GPU();
  for (const cpu::BatchNormShape& s : kBatchNormShapes) {
    const std::string at = norm_name(s.n, s.c, s.hw, "group", s.group);
    const std::size_t c = s.c, count = std::size_t(s.n) * s.c * s.hw, stats_count = std::size_t(2) * s.groups() * s.c;
    // Parameters and statistics are float32; x and dy are 16-bit.
    const Floats x = rounded<T>(norm_input(s.n, s.c, s.hw, 1)), dy = rounded<T>(random_floats(count, 6));
    const Floats w = random_floats(c, 2), b = random_floats(c, 3);
    const DeviceArray<T> dev_x(narrow<T>(x)), dev_dy(narrow<T>(dy));
    const DeviceArray<float> dev_w(w), dev_b(b);
    Floats y(count), stats(stats_count);
    std::vector<double> moments(3 * c, 0.0);
    int64_t tracked = 0;
    cpu::batch_norm_forward_train<float>(y.data(), stats.data(), x.data(), w.data(), b.data(), s, 1e-5, moments.data(),
                                         nullptr, nullptr, &tracked, 0.1);
    DeviceArray<T> dev_y(narrow<T>(Floats(count, kNaN)));
    DeviceArray<float> dev_stats(Floats(stats_count, kNaN));
    test::expect_close(forward_with_moments(dev_y.get(), dev_stats.get(), dev_x.get(), dev_w.get(), dev_b.get(), s),
                       moments, 1e-9, "moments" + at, test::rms_at_least_1(moments));
    test::expect_close(widen(dev_y.download()), y, kUlp<T>, "batch_norm_forward_train y" + at, test::rms_at_least_1(y));
    expect_close(dev_stats.download(), stats, "batch_norm_forward_train stats" + at);
    const Scratch scratch(batch_norm_backward_workspace(s));
    DeviceArray<T> dev_applied(narrow<T>(Floats(count, kNaN)));
    batch_norm_apply(dev_applied.get(), dev_x.get(), dev_w.get(), dev_b.get(), dev_stats.get(), s, nullptr);
    expect_bits(bits(dev_applied.download()), bits(dev_y.download()), "batch_norm_apply y" + at);

    // The backward from the device's statistics: dw, db float32; dx 16-bit.
    const Floats dev_stats_host = dev_stats.download();
    check_against_cpu(
        {c, c}, true,
        [&](auto& o, bool acc) {
          cpu::batch_norm_backward<float>(o[0], o[1], nullptr, dy.data(), x.data(), w.data(), dev_stats_host.data(), s,
                                          true, acc);
        },
        [&](auto& o, bool acc) {
          batch_norm_backward<T>(o[0], o[1], nullptr, dev_dy.get(), dev_x.get(), dev_w.get(), dev_stats.get(), s, true,
                                 acc, scratch.array.get(), scratch.bytes, nullptr);
        },
        "batch_norm_backward dw, db" + at);
    DeviceArray<float> dw(c), db(c);
    check_half<T>(
        {count}, false,
        [&](auto& o, bool) {
          Floats cw(c), cb(c);
          cpu::batch_norm_backward<float>(cw.data(), cb.data(), o[0], dy.data(), x.data(), w.data(),
                                          dev_stats_host.data(), s, true, false);
        },
        [&](auto& o, bool) {
          batch_norm_backward<T>(dw.get(), db.get(), o[0], dev_dy.get(), dev_x.get(), dev_w.get(), dev_stats.get(), s,
                                 true, false, scratch.array.get(), scratch.bytes, nullptr);
        },
        "batch_norm_backward dx" + at, kUlp<T>);
  }

  for (const cpu::GroupNormShape& s : {cpu::GroupNormShape{5, 6, 12, 3}, cpu::GroupNormShape{3, 8, 49, 2}}) {
    const std::string at = norm_name(s.n, s.c, s.hw, "groups", s.groups);
    const std::size_t c = s.c, count = std::size_t(s.n) * s.c * s.hw, stats_count = std::size_t(2) * s.n * s.groups;
    const Floats x = rounded<T>(norm_input(s.n, s.c, s.hw, 1)), dy = rounded<T>(random_floats(count, 6));
    const Floats w = random_floats(c, 2), b = random_floats(c, 3);
    const DeviceArray<T> dev_x(narrow<T>(x)), dev_dy(narrow<T>(dy));
    const DeviceArray<float> dev_w(w), dev_b(b);
    Floats y(count), stats(stats_count);
    cpu::group_norm_forward<float>(y.data(), stats.data(), x.data(), w.data(), b.data(), s, 1e-5);
    DeviceArray<T> dev_y(narrow<T>(Floats(count, kNaN)));
    DeviceArray<float> dev_stats(Floats(stats_count, kNaN));
    group_norm_forward(dev_y.get(), dev_stats.get(), dev_x.get(), dev_w.get(), dev_b.get(), s, 1e-5, nullptr);
    test::expect_close(widen(dev_y.download()), y, kUlp<T>, "group_norm_forward y" + at, test::rms_at_least_1(y));
    expect_close(dev_stats.download(), stats, "group_norm_forward stats" + at);
    const Floats dev_stats_host = dev_stats.download();
    check_against_cpu(
        {c, c}, true,
        [&](auto& o, bool acc) {
          cpu::group_norm_backward<float>(o[0], o[1], nullptr, dy.data(), x.data(), w.data(), dev_stats_host.data(), s,
                                          acc);
        },
        [&](auto& o, bool acc) {
          group_norm_backward<T>(o[0], o[1], nullptr, dev_dy.get(), dev_x.get(), dev_w.get(), dev_stats.get(), s, acc,
                                 nullptr);
        },
        "group_norm_backward dw, db" + at);
    DeviceArray<float> dw(c), db(c);
    check_half<T>(
        {count}, false,
        [&](auto& o, bool) {
          Floats cw(c), cb(c);
          cpu::group_norm_backward<float>(cw.data(), cb.data(), o[0], dy.data(), x.data(), w.data(),
                                          dev_stats_host.data(), s, false);
        },
        [&](auto& o, bool) {
          group_norm_backward<T>(dw.get(), db.get(), o[0], dev_dy.get(), dev_x.get(), dev_w.get(), dev_stats.get(), s,
                                 false, nullptr);
        },
        "group_norm_backward dx" + at, kUlp<T>);
  }
}

// cuBLAS in 16 bits: products of 16-bit values are exact in float32 and summed there, so the 16-bit
// outputs are the CPU's float results within one rounding (two with the bias, added after the product
// is stored), and the weight gradient is float32 within float rounding: micro-batches add into it in
// float32, where a 16-bit store would round it by up to 2^-9 (bf16) relative.
template <class T> void check_linear_half(cublasHandle_t blas) {
  for (auto [n, in, out] : {std::tuple{3, 5, 4}, {37, 33, 19}, {64, 400, 120}}) {
    const std::string at = " n=" + std::to_string(n) + " in=" + std::to_string(in) + " out=" + std::to_string(out);
    const Floats x = rounded<T>(random_floats(std::size_t(n) * in, 1)),
                 w = rounded<T>(random_floats(std::size_t(out) * in, 2)), b = rounded<T>(random_floats(out, 3)),
                 dy = rounded<T>(random_floats(std::size_t(n) * out, 4));
    const DeviceArray<T> dev_x(narrow<T>(x)), dev_w(narrow<T>(w)), dev_b(narrow<T>(b)), dev_dy(narrow<T>(dy));
    const std::size_t y_size = std::size_t(n) * out, x_size = std::size_t(n) * in, w_size = std::size_t(out) * in;
    std::vector<float> ws(cpu::linear_forward_workspace(n, in, out)), wsd(cpu::linear_backward_data_workspace(in, out));
    check_half<T>(
        {y_size}, false,
        [&](auto& o, bool) { cpu::linear_forward(o[0], x.data(), w.data(), b.data(), n, in, out, ws.data()); },
        [&](auto& o, bool) { linear_forward<T>(blas, o[0], dev_x.get(), dev_w.get(), dev_b.get(), n, in, out); },
        "linear_forward" + at, 2 * kUlp<T>);
    check_half<T>(
        {x_size}, true,
        [&](auto& o, bool acc) { cpu::linear_backward_data(o[0], dy.data(), w.data(), n, in, out, wsd.data(), acc); },
        [&](auto& o, bool acc) { linear_backward_data<T>(blas, o[0], dev_dy.get(), dev_w.get(), n, in, out, acc); },
        "linear_backward_data" + at, kUlp<T>);
    check_against_cpu(
        {w_size, std::size_t(out)}, true,
        [&](auto& o, bool acc) { cpu::linear_backward_weight(o[0], o[1], dy.data(), x.data(), n, in, out, acc); },
        [&](auto& o, bool acc) {
          linear_backward_weight<T>(blas, o[0], o[1], dev_dy.get(), dev_x.get(), n, in, out, acc);
        },
        "linear_backward_weight" + at);
    // Two micro-batches (the first writes, the second adds) against the batch at once.
    if (n < 2) continue;
    const int first = n / 2;
    DeviceArray<float> whole(w_size), parts(w_size);
    linear_backward_weight<T>(blas, whole.get(), nullptr, dev_dy.get(), dev_x.get(), n, in, out, false);
    linear_backward_weight<T>(blas, parts.get(), nullptr, dev_dy.get(), dev_x.get(), first, in, out, false);
    linear_backward_weight<T>(blas, parts.get(), nullptr, dev_dy.get() + std::size_t(first) * out,
                              dev_x.get() + std::size_t(first) * in, n - first, in, out, true);
    const Floats want = whole.download();
    test::expect_close(parts.download(), want, kTolerance, "linear_backward_weight over micro-batches" + at,
                       test::rms_at_least_1(want));
  }
}

TEST_F(CudaLibraryTest, LinearHalf) {
  check_linear_half<bf16>(blas_);
  check_linear_half<f16>(blas_);
}

#if CRUMB_HAVE_CUDNN

// cuDNN in 16 bits (its PSEUDO_BFLOAT16 / PSEUDO_HALF configurations: float32 arithmetic on tensor cores):
// the forward and the data gradient within two roundings of T (the output, and the bias added after it)
// of the CPU's float32 convolution of the same values. The weight gradient is checked too, in T, though
// the engine runs that pass in float32 (conv2d.cc).
template <class T> void check_conv_half(cudnnHandle_t handle, const cpu::Conv2dShape& s) {
  constexpr cudnnDataType_t dtype = std::is_same_v<T, bf16> ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  constexpr std::size_t kLimit = std::size_t{64} << 20;
  ConvPlan fwd(handle, s, ConvPass::Forward, kLimit, false, dtype),
      data(handle, s, ConvPass::BackwardData, kLimit, false, dtype),
      filter(handle, s, ConvPass::BackwardFilter, kLimit, false, dtype);
  const std::string at = " n=" + std::to_string(s.n) + " c_in=" + std::to_string(s.c_in) + " " + std::to_string(s.h) +
                         "x" + std::to_string(s.w) + " c_out=" + std::to_string(s.c_out) + " k=" + std::to_string(s.kh);
  const std::size_t w_size = std::size_t(s.c_out) * s.c_in * s.kh * s.kw;
  const Floats x = rounded<T>(random_floats(s.in_count(), 1)), w = rounded<T>(random_floats(w_size, 2)),
               b = rounded<T>(random_floats(s.c_out, 3)), dy = rounded<T>(random_floats(s.out_count(), 4));
  const DeviceArray<T> dev_x(narrow<T>(x)), dev_w(narrow<T>(w)), dev_b(narrow<T>(b)), dev_dy(narrow<T>(dy));
  DeviceArray<unsigned char> ws_fwd(fwd.workspace_bytes()), ws_data(data.workspace_bytes()),
      ws_filter(filter.workspace_bytes());
  Floats cpu_ws(std::max({cpu::conv2d_forward_workspace(s), cpu::conv2d_backward_data_workspace(s),
                          cpu::conv2d_backward_weight_workspace(s)}));
  check_half<T>(
      {std::size_t(s.out_count())}, false,
      [&](auto& o, bool) { cpu::conv2d_forward(o[0], x.data(), w.data(), b.data(), s, cpu_ws.data()); },
      [&](auto& o, bool) {
        conv_forward(handle, fwd, o[0], dev_x.get(), dev_w.get(), dev_b.get(), ws_fwd.get(), fwd.workspace_bytes());
      },
      "conv_forward" + at, 2 * kUlp<T>);
  check_half<T>(
      {std::size_t(s.in_count())}, true,
      [&](auto& o, bool acc) { cpu::conv2d_backward_data(o[0], dy.data(), w.data(), s, cpu_ws.data(), acc); },
      [&](auto& o, bool acc) {
        conv_backward_data(handle, data, o[0], dev_dy.get(), dev_w.get(), ws_data.get(), data.workspace_bytes(), acc);
      },
      "conv_backward_data" + at, 2 * kUlp<T>);
  check_half<T>(
      {w_size}, false,
      [&](auto& o, bool) {
        cpu::conv2d_backward_weight<float>(o[0], nullptr, dy.data(), x.data(), s, cpu_ws.data(), false);
      },
      [&](auto& o, bool) {
        conv_backward_filter(handle, filter, o[0], nullptr, dev_dy.get(), dev_x.get(), ws_filter.get(),
                             filter.workspace_bytes(), false);
      },
      "conv_backward_filter" + at, 2 * kUlp<T>);
}

TEST_F(CudaLibraryTest, Conv2dHalf) {
  for (const cpu::Conv2dShape& s : {
           conv_shape(8, 6, 14, 14, 16, 5, 5, 1, 1, 0, 0),    // LeNet conv2
           conv_shape(5, 3, 9, 8, 4, 3, 3, 2, 2, 1, 1),       // odd sizes, stride 2, pad 1
           conv_shape(64, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1),  // tensor-core friendly channels at a real batch
       }) {
    check_conv_half<bf16>(dnn_, s);
    check_conv_half<f16>(dnn_, s);
  }
}

#endif  // CRUMB_HAVE_CUDNN

}  // namespace
}  // namespace crumb::cuda

#endif  // CRUMB_HAVE_CUDA
