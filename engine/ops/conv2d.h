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
// A square kernel with the same stride and padding in both directions; "<name>.weight" and "<name>.bias".
// groups: channel groups (torch.nn.Conv2d's; the input's channel count: depthwise).
ValueId conv2d(Graph& g, ValueId x, int out_channels, int kernel, int stride, int pad, const std::string& name,
               bool bias = true, int groups = 1);
}  // namespace nn

}  // namespace crumb
