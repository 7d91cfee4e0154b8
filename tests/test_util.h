// What the test files share: random data, comparisons (relative, absolute, NaN-aware) and the skip of
// tests that need a CUDA device. One copy, so every test judges closeness and NaN the same way.
#pragma once
#include <gtest/gtest.h>

#include "engine/base/error.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "engine/device/backend.h"
#include "engine/train/model_registry.h"

// Tests that need a CUDA device skip cleanly without one (a CPU-only build, or no usable GPU).
#define CRUMB_REQUIRE_GPU()                                                                             \
  do {                                                                                                  \
    if (!::crumb::device_available(::crumb::Device::CUDA)) GTEST_SKIP() << "no usable CUDA device in this build/machine"; \
  } while (0)

namespace crumb::test {

// A file name in the temporary folder that is this process's own (ctest runs tests in parallel):
// crumb_<what>_<pid>_<name>.
inline std::string temp_path(const std::string& what, const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("crumb_" + what + "_" + std::to_string(::getpid()) + "_" + name)).string();
}

// CPU against CUDA in float32: both sides compute in different summation orders (and cuBLAS/cuDNN pick
// their own), so results agree to float rounding of the sums, not bit for bit.
constexpr double kParityTolerance = 1e-4;

// count values uniform in [lo, hi), drawn in T: a seed gives the same values wherever it is used.
template <class T> std::vector<T> random_values(std::size_t count, unsigned seed, T lo = -1, T hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<T> dist(lo, hi);
  std::vector<T> v(count);
  for (T& e : v) e = dist(gen);
  return v;
}
inline std::vector<float> random_floats(std::size_t count, unsigned seed, float lo = -1, float hi = 1) {
  return random_values<float>(count, seed, lo, hi);
}
inline std::vector<double> random_doubles(std::size_t count, unsigned seed, double lo = -1, double hi = 1) {
  return random_values<double>(count, seed, lo, hi);
}

// count class labels in [0, classes).
inline std::vector<int32_t> random_labels(std::size_t count, int classes, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, classes - 1);
  std::vector<int32_t> v(count);
  for (int32_t& e : v) e = dist(gen);
  return v;
}

// Checks ok(got[i], want[i]) for every element; reports the first that fails only.
template <class G, class W, class Ok>
void expect_each(const std::vector<G>& got, const std::vector<W>& want, const std::string& what, Ok ok) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!ok(got[i], want[i])) {
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
      return;
    }
  }
}

// |got - want| <= tol * (scale + |want|): relative for large values, absolute (tol * scale) near zero. A
// NaN on either side fails.
template <class G, class W>
void expect_close(const std::vector<G>& got, const std::vector<W>& want, double tol, const std::string& what,
                  double scale = 1) {
  expect_each(got, want, what, [&](double g, double w) { return std::abs(g - w) <= tol * (scale + std::abs(w)); });
}

// The root mean square of v, at least 1. The rounding error of a long float sum scales with the size of
// its terms, not with its result, which may cancel to near zero: a scale for expect_close.
template <class T> double rms_at_least_1(const std::vector<T>& v) {
  double square_sum = 0;
  for (T e : v) square_sum += double(e) * double(e);
  return std::max(1.0, std::sqrt(square_sum / double(std::max<std::size_t>(v.size(), 1))));
}

// The message of the crumb::Error that f throws ("no error" if it returns).
template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// ||a - b|| / ||b|| over whole blocks: one number that a few elements switched by rounding (a ReLU whose
// input lies within rounding of 0) do not dominate.
inline double norm_error(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < b.size() && i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

// Largest |a - b| relative to the largest |b| (at least 1e-3, so all-tiny tensors are not judged on
// noise): one number for a whole tensor. A NaN on one side only is an infinite error; NaN on both agrees.
template <class T> double relative_error(const std::vector<T>& a, const std::vector<T>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 1e-3;
  for (T v : b) scale = std::max(scale, std::fabs(double(v)));
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (!std::isnan(a[i])) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  }
  return worst / scale;
}

// Equal values, or NaN on both sides (any payload).
template <class T> void expect_same(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  expect_each(got, want, what, [](T g, T w) { return g == w || (std::isnan(g) && std::isnan(w)); });
}

// Identical bits, for outputs that copy one input element each (a NaN's payload and sign included).
template <class T> void expect_bits(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  expect_each(got, want, what, [](const T& g, const T& w) { return std::memcmp(&g, &w, sizeof(T)) == 0; });
}

// Fashion-MNIST's shape (1x28x28, 10 classes), or the smallest images the model takes (vgg11_bn: 32x32),
// for tests that build every reference model.
inline models::ModelSpec spec_for(const std::string& model) {
  const int size = std::max(28, models::min_image_size(model));
  return {1, size, size, 10};
}

}  // namespace crumb::test
