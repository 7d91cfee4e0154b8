// mlp: Flatten, Linear(features, 256), ReLU, Linear(256, 128), ReLU, Linear(128, classes).
#include "engine/base/registry.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/softmax_xent.h"
#include "engine/train/model_registry.h"

namespace crumb::models {

static void build_mlp(Graph& g, ValueId x, ValueId y, const ModelSpec& in) {
  ValueId h = nn::flatten(g, x, "0");
  h = nn::relu(g, nn::linear(g, h, 256, "1"), "2");
  h = nn::relu(g, nn::linear(g, h, 128, "3"), "4");
  nn::softmax_cross_entropy(g, nn::linear(g, h, in.classes, "5"), y, "loss");
}

CRUMB_ON_LOAD {
  register_model({"mlp", build_mlp});
}

}  // namespace crumb::models
