// LeNet-5 as in PyTorch's classic examples: Conv2d(c, 6, 5, padding=2), ReLU, MaxPool2d(2),
// Conv2d(6, 16, 5), ReLU, MaxPool2d(2), Flatten, Linear(400, 120), ReLU, Linear(120, 84), ReLU,
// Linear(84, classes).
#include "engine/base/registry.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/train/model_registry.h"

namespace crumb::models {

static void build_lenet5(Graph& g, ValueId x, ValueId y, const ModelSpec& in) {
  ValueId h = nn::relu(g, nn::conv2d(g, x, 6, 5, "0", nn::ConvOptions().with_pad(2)), "1");
  h = nn::max_pool2d(g, h, 2, 2, "2");
  h = nn::relu(g, nn::conv2d(g, h, 16, 5, "3"), "4");
  h = nn::flatten(g, nn::max_pool2d(g, h, 2, 2, "5"), "6");
  h = nn::relu(g, nn::linear(g, h, 120, "7"), "8");
  h = nn::relu(g, nn::linear(g, h, 84, "9"), "10");
  nn::softmax_cross_entropy(g, nn::linear(g, h, in.classes, "11"), y, "loss");
}

CRUMB_ON_LOAD {
  register_model({"lenet5", build_lenet5});
}

}  // namespace crumb::models
