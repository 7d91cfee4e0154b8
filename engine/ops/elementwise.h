// Elementwise ops: ReLU, add, and reshape (a view). kAdd is declared in engine/graph/autograd.h, which
// sums gradients with it.
#pragma once
#include <string>

#include "engine/graph/autograd.h"
#include "engine/graph/graph.h"
#include "engine/graph/op.h"

namespace crumb {

// kCast (to the float dtype) is declared in engine/graph/op.h; kCastMaster casts to the master dtype.
extern const OpDef kRelu, kReluBwd, kReshape, kCastMaster;

struct ReshapeAttrs {
  Dims dims;  // target per-sample dims
};

namespace nn {
ValueId relu(Graph& g, ValueId x, const std::string& name);
ValueId flatten(Graph& g, ValueId x, const std::string& name);
ValueId add(Graph& g, ValueId a, ValueId b, const std::string& name);
}  // namespace nn

}  // namespace crumb
