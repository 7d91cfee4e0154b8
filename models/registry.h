// Reference models, built through the public graph API, and a registry from name to builder.
// Layer names follow nn.Sequential indices of the same PyTorch model, so parameter names equal the
// PyTorch state_dict keys ("0.weight", "0.bias", ...).
#pragma once
#include <string>
#include <vector>

#include "engine/graph.h"

namespace crumb::models {

struct InputSpec {
  int channels = 1, height = 28, width = 28, classes = 10;
};

// Builds the forward graph with inputs "x" [batch, c, h, w] and "y" [batch] (int32) and the loss,
// with the exact rewrites of optimize_graph applied.
// dtype F64 builds the same model in double precision (gradient checks).
Graph build(const std::string& name, InputSpec in = {}, DType dtype = DType::F32);
std::vector<std::string> names();

void build_mlp(Graph& g, ValueId x, ValueId y, const InputSpec& in);
void build_lenet5(Graph& g, ValueId x, ValueId y, const InputSpec& in);
void build_cnn(Graph& g, ValueId x, ValueId y, const InputSpec& in);

}  // namespace crumb::models
