// The small CNN of PyTorch's classic MNIST example: Conv2d(c, 32, 3, padding=1), ReLU, MaxPool2d(2),
// Conv2d(32, 64, 3, padding=1), ReLU, MaxPool2d(2), Flatten, Linear(64*h/4*w/4, 128), ReLU,
// Linear(128, classes).
#include "engine/base/registry.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/train/model_registry.h"

namespace crumb::models {

static void build_cnn(Graph& g, ValueId x, ValueId y, const ModelSpec& in) {
  ValueId h = nn::relu(g, nn::conv2d(g, x, 32, 3, "0", nn::ConvOptions().with_pad(1)), "1");
  h = nn::max_pool2d(g, h, 2, 2, "2");
  h = nn::relu(g, nn::conv2d(g, h, 64, 3, "3", nn::ConvOptions().with_pad(1)), "4");
  h = nn::flatten(g, nn::max_pool2d(g, h, 2, 2, "5"), "6");
  h = nn::relu(g, nn::linear(g, h, 128, "7"), "8");
  nn::softmax_cross_entropy(g, nn::linear(g, h, in.classes, "9"), y, "loss");
}

CRUMB_ON_LOAD {
  register_model({"cnn", build_cnn});
}

}  // namespace crumb::models
