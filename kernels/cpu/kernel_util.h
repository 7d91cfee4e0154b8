// Internal helpers shared by the CPU kernel sources. Not part of the kernel interface.
#pragma once
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include <Eigen/Core>

namespace crumb::cpu::detail {

// Below this many elements an OpenMP fork/join (~1-2 us on two cores) costs more than the
// memory-bound loop it would split.
inline constexpr std::ptrdiff_t kParallelGrain = 32768;

// The write mode of a gradient output as a compile-time flag, so hot loops are compiled once per
// mode instead of testing `accumulate` per element.
template <class F> void with_write_mode(bool accumulate, F&& body) {
  if (accumulate) {
    body(std::true_type{});
  } else {
    body(std::false_type{});
  }
}

template <class Acc, class T> inline void put(Acc, T& dst, T value) {
  if constexpr (Acc::value) {
    dst += value;
  } else {
    dst = value;
  }
}

// dst (=|+=) src for Eigen expressions; noalias keeps products from evaluating into a temporary.
template <class Dst, class Src> void assign(Dst&& dst, const Src& src, bool accumulate) {
  if (accumulate) {
    dst.noalias() += src;
  } else {
    dst.noalias() = src;
  }
}

// Half-open range of output positions.
struct Range {
  int lo, hi;
};

// Output positions o in [lo, hi) whose input coordinate o * stride - pad + k lies in [0, in): the
// positions where window tap k hits the image rather than padding.
inline Range valid_range(int k, int stride, int pad, int in, int out) {
  const int lo = std::min(out, pad > k ? (pad - k + stride - 1) / stride : 0);
  const int hi = std::clamp((in + pad - k + stride - 1) / stride, lo, out);
  return {lo, hi};
}

template <class T> using MatR = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <class T>
using CMatR = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <class T> using VecMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;
template <class T> using CVecMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;

}  // namespace crumb::cpu::detail
