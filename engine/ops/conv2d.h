// 2-D convolution on NCHW: x [n, c_in, h, w], w [c_out, c_in / groups, kh, kw], optional b [c_out]. Its node
// carries WindowAttrs (engine/ops/window.h) and, as kernel geometry, a cpu::Conv2dShape for one sample.
#pragma once
#include <string>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"
#include "engine/ops/window.h"

namespace crumb {

extern const OpDef kConv2d, kConv2dBwdData, kConv2dBwdWeight;

namespace nn {
// How a convolution slides and what it holds beside its weight, named where it is built:
//   nn::conv2d(g, x, 64, 3, "conv", nn::ConvOptions().with_stride(2).with_pad(1).with_bias(false)).
struct ConvOptions {
  int stride = 1;
  int pad = 0;        // zeros on every side
  bool bias = true;   // "<name>.bias"
  int groups = 1;     // channel groups (torch.nn.Conv2d's; the input's channel count: depthwise)
  ConvOptions with_stride(int s) const { return with(&ConvOptions::stride, s); }
  ConvOptions with_pad(int p) const { return with(&ConvOptions::pad, p); }
  ConvOptions with_bias(bool b) const { return with(&ConvOptions::bias, b); }
  ConvOptions with_groups(int n) const { return with(&ConvOptions::groups, n); }

 private:
  template <class T> ConvOptions with(T ConvOptions::*field, T value) const {
    ConvOptions o = *this;
    o.*field = value;
    return o;
  }
};
// A square kernel with the same stride and padding in both directions; "<name>.weight" and "<name>.bias".
ValueId conv2d(Graph& g, ValueId x, int out_channels, int kernel, const std::string& name,
               const ConvOptions& options = {});
}  // namespace nn

}  // namespace crumb
