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

namespace nn {
// Adds "<name>.weight" [out_features, in] and, with bias, "<name>.bias" [out_features].
ValueId linear(Graph& g, ValueId x, int out_features, const std::string& name, bool bias = true);
}  // namespace nn

}  // namespace crumb
