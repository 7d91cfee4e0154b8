// The window of a convolution or a pooling layer (kernel, stride, padding), shared by the conv2d and pool
// families.
#pragma once
#include <cstdint>
#include <string>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"

namespace crumb {

struct WindowAttrs {
  int kh = 0, kw = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int groups = 1;  // a convolution's channel groups (Conv2dShape::groups); pools have 1
  bool relu = false;  // a convolution's fused ReLU epilogue (engine/ops/relu_epilogue.h); pools have none
  // A kernel x kernel window, the same stride and padding in both directions.
  static WindowAttrs square(int kernel, int stride, int pad) {
    WindowAttrs a;
    a.kh = a.kw = kernel;
    a.stride_h = a.stride_w = stride;
    a.pad_h = a.pad_w = pad;
    return a;
  }
};

namespace ops {
// The window fields of a conv/pool kernel shape (spatial extent, kernel, stride, padding, floor-mode
// output extent) from per-sample [c, h, w] dims and node n's attributes; batch 1. The extents are computed
// in 64 bits: one that the shape's int fields cannot hold is an error naming the layer and the shapes, as is
// a window (of `channels` channels: a convolution's input channels, 1 for a pool) past 2^31 - 1 elements.
template <class Shape>
void set_window(const Node& n, Shape& s, const Dims& x, const WindowAttrs& a, int64_t channels) {
  const int64_t h_out = (x[1] + 2 * int64_t{a.pad_h} - a.kh) / a.stride_h + 1,
                w_out = (x[2] + 2 * int64_t{a.pad_w} - a.kw) / a.stride_w + 1;
  if (channels * a.kh * int64_t{a.kw} > INT32_MAX)
    fail(n, "its window of " + (channels > 1 ? std::to_string(channels) + " channels x " : std::string()) +
                std::to_string(a.kh) + "x" + std::to_string(a.kw) + " holds more than 2^31 - 1 elements");
  if (h_out > INT32_MAX || w_out > INT32_MAX)
    fail(n, "its input " + dims_str(x) + " with kernel " + std::to_string(a.kh) + "x" + std::to_string(a.kw) +
                ", stride " + std::to_string(a.stride_h) + "x" + std::to_string(a.stride_w) + " and padding " +
                std::to_string(a.pad_h) + "x" + std::to_string(a.pad_w) + " gives an output of " +
                std::to_string(h_out) + "x" + std::to_string(w_out) + ", more than 2^31 - 1 a side");
  s.n = 1;
  s.h = static_cast<int>(x[1]);
  s.w = static_cast<int>(x[2]);
  s.kh = a.kh;
  s.kw = a.kw;
  s.stride_h = a.stride_h;
  s.stride_w = a.stride_w;
  s.pad_h = a.pad_h;
  s.pad_w = a.pad_w;
  s.h_out = static_cast<int>(h_out);
  s.w_out = static_cast<int>(w_out);
}
}  // namespace ops

}  // namespace crumb
