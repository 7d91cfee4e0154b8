// Pooling on NCHW: max and average over windows (WindowAttrs, engine/ops/window.h), global average and
// adaptive average pooling. Their kernel geometry: cpu::Pool2dShape, GlobalPoolGeometry or
// cpu::AdaptivePool2dShape, for one sample.
#pragma once
#include <string>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"
#include "engine/ops/window.h"

namespace crumb {

extern const OpDef kMaxPool2d, kMaxPool2dBwd, kAvgPool2d, kAvgPool2dBwd, kGlobalAvgPool, kGlobalAvgPoolBwd;
extern const OpDef kAdaptiveAvgPool2d, kAdaptiveAvgPool2dBwd;

// adaptive_avg_pool2d's output size (PyTorch's AdaptiveAvgPool2d((h_out, w_out))).
struct AdaptivePoolAttrs {
  int h_out = 1, w_out = 1;
};
struct GlobalPoolGeometry {  // x [n, c, h, w] with hw = h * w
  int c = 0, hw = 0;
};

namespace nn {
ValueId max_pool2d(Graph& g, ValueId x, int kernel, int stride, const std::string& name, int pad = 0);
ValueId avg_pool2d(Graph& g, ValueId x, int kernel, int stride, const std::string& name, int pad = 0);
ValueId global_avg_pool(Graph& g, ValueId x, const std::string& name);
// AdaptiveAvgPool2d((h_out, w_out)): PyTorch's bins; a smaller input is upsampled (1x1 -> 7x7 repeats it).
ValueId adaptive_avg_pool2d(Graph& g, ValueId x, int h_out, int w_out, const std::string& name);
}  // namespace nn

}  // namespace crumb
