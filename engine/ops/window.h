// The window of a convolution or a pooling layer (kernel, stride, padding), shared by the conv2d and pool
// families.
#pragma once
#include "engine/graph/graph.h"

namespace crumb {

struct WindowAttrs {
  int kh = 0, kw = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int groups = 1;  // a convolution's channel groups (Conv2dShape::groups); pools have 1
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
// output extent) from per-sample [c, h, w] dims and the node's attributes; batch 1.
template <class Shape> void set_window(Shape& s, const Dims& x, const WindowAttrs& a) {
  s.n = 1;
  s.h = static_cast<int>(x[1]);
  s.w = static_cast<int>(x[2]);
  s.kh = a.kh;
  s.kw = a.kw;
  s.stride_h = a.stride_h;
  s.stride_w = a.stride_w;
  s.pad_h = a.pad_h;
  s.pad_w = a.pad_w;
  s.h_out = (s.h + 2 * s.pad_h - s.kh) / s.stride_h + 1;
  s.w_out = (s.w + 2 * s.pad_w - s.kw) / s.stride_w + 1;
}
}  // namespace ops

}  // namespace crumb
