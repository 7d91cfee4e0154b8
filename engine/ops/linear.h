// The linear layer: y [n, out] = x [n, in] w^T + b, with w [out, in] (PyTorch's layout and names).
#pragma once
#include <string>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"

namespace crumb {

extern const OpDef kLinear, kLinearBwdData, kLinearBwdWeight;

// The kernel geometry its shape rule stores on the node: x [n, in], w [out, in].
struct LinearGeometry {
  int in = 0, out = 0;
};

// Its attributes, where it has any (a node without is a plain linear layer).
struct LinearAttrs {
  bool relu = false;  // a fused ReLU epilogue (engine/ops/relu_epilogue.h)
};

namespace nn {
// Adds "<name>.weight" [out_features, in] and, with bias, "<name>.bias" [out_features].
ValueId linear(Graph& g, ValueId x, int out_features, const std::string& name, bool bias = true);
}  // namespace nn

}  // namespace crumb
