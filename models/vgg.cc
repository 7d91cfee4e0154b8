// VGG-11 with BatchNorm, torchvision's layout and state_dict names (torchvision.models.vgg11_bn), so
// torchvision loads Crumb's checkpoints and the other way round: "features" is configuration A (64, M,
// 128, M, 256, 256, M, 512, 512, M, 512, 512, M) of 3x3 convolutions (padding 1, with bias) + norm + ReLU
// and 2x2 max pools, numbered as nn.Sequential numbers them ("features.4.weight", "features.5.running_var");
// then AdaptiveAvgPool2d(7, 7) ("avgpool", which upsamples the 1x1 map of a 32x32 image) and the
// classifier Linear(512*7*7, 4096), ReLU, Dropout, Linear(4096, 4096), ReLU, Dropout, Linear(4096, classes)
// ("classifier.0" .. "classifier.6"). Initialised as torchvision does: convolutions kaiming_normal_
// (fan_out, ReLU gain) with bias 0, norm layers weight 1 and bias 0, linear layers N(0, 0.01^2) with bias 0.
// The norm is the spec's (--norm), dropout's p the spec's (torchvision's default 0.5).
#include <cmath>
#include <string>

#include "engine/ops/conv2d.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "models/norm_layer.h"
#include "engine/base/registry.h"
#include "engine/train/model_registry.h"

namespace crumb::models {
namespace {

constexpr int kPool = 0;  // a 2x2 max pool in the configuration
// Five pools: the registry refuses images smaller than 32x32.
constexpr int kConfigA[] = {64, kPool, 128, kPool, 256, 256, kPool, 512, 512, kPool, 512, 512, kPool};

ValueId init(Graph& g, ValueId y, const std::string& name, ParamInit weight) {
  g.value(g.find_value(name + ".weight")).init = weight;
  g.value(g.find_value(name + ".bias")).init = ParamInit::constant(0);
  return y;
}

ValueId linear(Graph& g, ValueId x, int out, const std::string& name) {
  return init(g, nn::linear(g, x, out, name), name, ParamInit::normal(0.01));
}

}  // namespace

static void build_vgg11_bn(Graph& g, ValueId x, ValueId y, const ModelSpec& spec) {
  ValueId h = x;
  int index = 0;
  for (int v : kConfigA) {
    const std::string at = "features." + std::to_string(index);
    if (v == kPool) {
      h = nn::max_pool2d(g, h, 2, 2, at);
      index += 1;
      continue;
    }
    h = init(g, nn::conv2d(g, h, v, 3, at, nn::ConvOptions().with_pad(1)), at,
             ParamInit::normal(std::sqrt(2.0 / (v * 9))));
    h = norm_layer(g, h, "features." + std::to_string(index + 1), spec.norm);
    h = nn::relu(g, h, "features." + std::to_string(index + 2));
    index += 3;
  }
  h = nn::flatten(g, nn::adaptive_avg_pool2d(g, h, 7, 7, "avgpool"), "flatten");
  h = nn::dropout(g, nn::relu(g, linear(g, h, 4096, "classifier.0"), "classifier.1"), spec.dropout, "classifier.2");
  h = nn::dropout(g, nn::relu(g, linear(g, h, 4096, "classifier.3"), "classifier.4"), spec.dropout, "classifier.5");
  nn::softmax_cross_entropy(g, linear(g, h, spec.classes, "classifier.6"), y, "loss");
}

CRUMB_ON_LOAD {
  ModelEntry e{"vgg11_bn", build_vgg11_bn};
  e.min_size = 32;  // five 2x2 max pools floor the size five times: below 32 pixels nothing is left
  e.has_norm = e.has_dropout = true;
  register_model(e);
}

}  // namespace crumb::models
