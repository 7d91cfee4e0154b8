// 2-D convolution on NCHW: x [n, c_in, h, w], w [c_out, c_in, kh, kw], optional b [c_out]. Its node
// carries WindowAttrs (engine/ops/window.h) and, as kernel geometry, a cpu::Conv2dShape for one sample.
#pragma once
#include <string>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"
#include "engine/ops/window.h"

namespace crumb {

extern const OpDef kConv2d, kConv2dBwdData, kConv2dBwdWeight;

namespace nn {
// A square kernel with the same stride and padding in both directions; "<name>.weight" and "<name>.bias".
ValueId conv2d(Graph& g, ValueId x, int out_channels, int kernel, int stride, int pad, const std::string& name,
               bool bias = true);
}  // namespace nn

}  // namespace crumb
