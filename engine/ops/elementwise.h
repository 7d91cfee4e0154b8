// Elementwise ops: ReLU, LeakyReLU, Hardtanh (ReLU6), add, and reshape (a view). `add` and the casts are
// the ops the graph inserts on its own, so engine/graph/graph_ops.h declares them; their rows are here.
#pragma once
#include <string>

#include "engine/graph/autograd.h"
#include "engine/graph/graph.h"
#include "engine/graph/graph_ops.h"
#include "engine/graph/op.h"

namespace crumb {

extern const OpDef kRelu, kReluBwd, kReshape;
// LeakyReLU and Hardtanh, in place as ReLU: their backward reads the output, which determines the slope.
extern const OpDef kLeakyRelu, kLeakyReluBwd, kHardtanh, kHardtanhBwd;

struct LeakyReluAttrs {
  double negative_slope = 0.01;  // >= 0 (a negative one would make the output ambiguous for the backward)
};

struct HardtanhAttrs {
  double min_val = -1, max_val = 1;  // min_val < max_val
};

struct ReshapeAttrs {
  Dims dims;  // target per-sample dims
};

namespace nn {
ValueId relu(Graph& g, ValueId x, const std::string& name);
ValueId leaky_relu(Graph& g, ValueId x, double negative_slope, const std::string& name);
// min(max(x, min_val), max_val); ReLU6 is hardtanh(x, 0, 6).
ValueId hardtanh(Graph& g, ValueId x, double min_val, double max_val, const std::string& name);
ValueId flatten(Graph& g, ValueId x, const std::string& name);
// x as per-sample `dims` (a view; the element count must match).
ValueId reshape(Graph& g, ValueId x, const Dims& dims, const std::string& name);
ValueId add(Graph& g, ValueId a, ValueId b, const std::string& name);
}  // namespace nn

}  // namespace crumb
