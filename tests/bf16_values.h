// Random bf16 operands for the kernel tests of the bf16 paths, and their float32 values.
#pragma once
#include <random>
#include <vector>

#include "kernels/half.h"

namespace crumb {

// count standard-normal values rounded to bf16.
inline std::vector<bf16> random_bf16(std::size_t count, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<bf16> v(count);
  for (bf16& x : v) x = to_bf16(dist(rng));
  return v;
}

// v's values as float32 (exact).
inline std::vector<float> widened(const std::vector<bf16>& v) {
  std::vector<float> f(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) f[i] = to_float(v[i]);
  return f;
}

}  // namespace crumb
