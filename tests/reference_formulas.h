// The closed formulas that the PyTorch parity tests share with their reference scripts
// (tools/bench/torchvision_reference.py, which tools/bench/autocast_reference.py imports them from):
// weights, inputs and labels that both sides compute alike, so no tensor file is needed, and the
// summary of a tensor that the reference headers record.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/run/params.h"

namespace crumb::test {

inline int name_key(const std::string& name) {
  int sum = 0;
  for (unsigned char c : name) sum += c;
  return sum % 97;
}
// Uniform in [-1, 1) from an integer by a multiplicative hash: exact in double on every machine.
inline double hashed(int64_t j) {
  return static_cast<double>((j * 2654435761LL) % (int64_t{1} << 32)) / (1LL << 31) - 1.0;
}

// Every parameter from the formula (computed in double, stored as T: the master dtype): a matrix
// wave / sqrt(fan_in), a norm layer's scale 1 + 0.1 wave, any other vector 0.1 wave.
template <class T> void init_like_reference(const Graph& g, ParamStore& params) {
  for (ValueId p : g.params()) {
    const Value& v = g.value(p);
    const int64_t n = v.count(1);
    T* data = static_cast<T*>(params.data(p));
    const int64_t key = 7919 * name_key(v.name);
    const bool matrix = v.dims.size() >= 2;
    const bool scale = v.name.size() > 7 && v.name.compare(v.name.size() - 7, 7, ".weight") == 0;
    const double root_fan_in = matrix ? std::sqrt(static_cast<double>(n / v.dims[0])) : 1.0;
    for (int64_t i = 0; i < n; ++i) {
      const double wave = hashed(i + key);
      data[i] = static_cast<T>(matrix ? wave / root_fan_in : scale ? 1.0 + 0.1 * wave : 0.1 * wave);
    }
  }
}

// n input elements, and the labels of `batch` samples.
template <class T> std::vector<T> reference_inputs(std::size_t n) {
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>(hashed(static_cast<int64_t>(i) + 12345));
  return x;
}
inline std::vector<int32_t> reference_labels(int batch, int classes) {
  std::vector<int32_t> y(batch);
  for (int s = 0; s < batch; ++s) y[s] = (3 * s + 1) % classes;
  return y;
}

// The L2 norm of a tensor and its dot product with cos(0.7 (i mod Period)); the cosines come from a table.
template <int Period, class T> std::pair<double, double> summarise(const T* v, int64_t n) {
  static const std::vector<double> cosines = [] {
    std::vector<double> c(Period);
    for (int i = 0; i < Period; ++i) c[i] = std::cos(0.7 * i);
    return c;
  }();
  double l2 = 0, dot = 0;
  for (int64_t i = 0; i < n; ++i) {
    l2 += double(v[i]) * double(v[i]);
    dot += double(v[i]) * cosines[i % Period];
  }
  return {std::sqrt(l2), dot};
}

}  // namespace crumb::test
