// Residual networks with torchvision's layout and state_dict names ("conv1.weight", "bn1.running_mean",
// "layer2.0.downsample.1.weight", "fc.bias"), so torchvision's models load Crumb's checkpoints and the
// other way round:
// - resnet18 / resnet50: torchvision.models.resnet18 / resnet50 (BasicBlock [2, 2, 2, 2], Bottleneck
//   [3, 4, 6, 3] with the stride on the 3x3 convolution, "ResNet v1.5"): a 7x7 stride-2 stem and a 3x3
//   stride-2 max pool, any input of at least 32x32 (28x28 works too: the last stage is then 1x1);
// - resnet20: He et al. 2016's CIFAR network (3 stages of 3 BasicBlocks with 16, 32, 64 channels after a
//   3x3 stem), with torchvision's names and its projection shortcut (1x1 convolution + norm) where the
//   shape changes, rather than the paper's zero-padding shortcut.
// Convolutions have no bias and start as torchvision's (kaiming_normal_, fan_out, ReLU gain); norm
// layers at weight 1, bias 0; the classifier as PyTorch's Linear. The norm is the spec's (--norm).
#include <cmath>
#include <initializer_list>
#include <string>

#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "models/norm_layer.h"
#include "engine/base/registry.h"
#include "engine/train/model_registry.h"

namespace crumb::models {
namespace {

ValueId conv(Graph& g, ValueId x, int out, int k, int stride, const std::string& name) {
  const ValueId y =
      nn::conv2d(g, x, out, k, name, nn::ConvOptions().with_stride(stride).with_pad(k / 2).with_bias(false));
  g.value(g.find_value(name + ".weight")).init = ParamInit::normal(std::sqrt(2.0 / (out * k * k)));
  return y;
}

int channels(const Graph& g, ValueId x) { return static_cast<int>(g.value(x).dims[0]); }

// The identity, or a 1x1 projection where the block changes the shape.
ValueId shortcut(Graph& g, ValueId x, int out, int stride, const std::string& p, const ModelSpec& spec) {
  if (stride == 1 && channels(g, x) == out) return x;
  return norm_layer(g, conv(g, x, out, 1, stride, p + ".downsample.0"), p + ".downsample.1", spec.norm);
}

ValueId basic_block(Graph& g, ValueId x, int planes, int stride, const std::string& p, const ModelSpec& spec) {
  ValueId h = nn::relu(g, norm_layer(g, conv(g, x, planes, 3, stride, p + ".conv1"), p + ".bn1", spec.norm), p + ".relu1");
  h = norm_layer(g, conv(g, h, planes, 3, 1, p + ".conv2"), p + ".bn2", spec.norm);
  return nn::relu(g, nn::add(g, h, shortcut(g, x, planes, stride, p, spec), p + ".add"), p + ".relu2");
}

ValueId bottleneck(Graph& g, ValueId x, int planes, int stride, const std::string& p, const ModelSpec& spec) {
  ValueId h = nn::relu(g, norm_layer(g, conv(g, x, planes, 1, 1, p + ".conv1"), p + ".bn1", spec.norm), p + ".relu1");
  h = nn::relu(g, norm_layer(g, conv(g, h, planes, 3, stride, p + ".conv2"), p + ".bn2", spec.norm), p + ".relu2");
  h = norm_layer(g, conv(g, h, 4 * planes, 1, 1, p + ".conv3"), p + ".bn3", spec.norm);
  return nn::relu(g, nn::add(g, h, shortcut(g, x, 4 * planes, stride, p, spec), p + ".add"), p + ".relu3");
}

using Block = ValueId (*)(Graph&, ValueId, int, int, const std::string&, const ModelSpec&);

// Stages "layer1".. of blocks[i] blocks with planes[i] planes; every stage after the first halves the
// spatial size in its first block.
ValueId stages(Graph& g, ValueId h, Block block, std::initializer_list<int> blocks, std::initializer_list<int> planes,
               const ModelSpec& spec) {
  auto b = blocks.begin();
  int stage = 0;
  for (int p : planes) {
    for (int i = 0; i < *b; ++i) {
      const std::string name = "layer" + std::to_string(stage + 1) + "." + std::to_string(i);
      h = block(g, h, p, stage > 0 && i == 0 ? 2 : 1, name, spec);
    }
    ++b;
    ++stage;
  }
  return h;
}

void head(Graph& g, ValueId h, ValueId y, const ModelSpec& spec) {
  nn::softmax_cross_entropy(g, nn::linear(g, nn::global_avg_pool(g, h, "avgpool"), spec.classes, "fc"), y, "loss");
}

// torchvision's stem: conv 7x7 stride 2, norm, ReLU, max pool 3x3 stride 2.
ValueId imagenet_stem(Graph& g, ValueId x, const ModelSpec& spec) {
  const ValueId h = nn::relu(g, norm_layer(g, conv(g, x, 64, 7, 2, "conv1"), "bn1", spec.norm), "relu");
  return nn::max_pool2d(g, h, 3, 2, "maxpool", 1);
}

}  // namespace

static void build_resnet20(Graph& g, ValueId x, ValueId y, const ModelSpec& spec) {
  ValueId h = nn::relu(g, norm_layer(g, conv(g, x, 16, 3, 1, "conv1"), "bn1", spec.norm), "relu");
  head(g, stages(g, h, basic_block, {3, 3, 3}, {16, 32, 64}, spec), y, spec);
}

static void build_resnet18(Graph& g, ValueId x, ValueId y, const ModelSpec& spec) {
  head(g, stages(g, imagenet_stem(g, x, spec), basic_block, {2, 2, 2, 2}, {64, 128, 256, 512}, spec), y, spec);
}

static void build_resnet50(Graph& g, ValueId x, ValueId y, const ModelSpec& spec) {
  head(g, stages(g, imagenet_stem(g, x, spec), bottleneck, {3, 4, 6, 3}, {64, 128, 256, 512}, spec), y, spec);
}

CRUMB_ON_LOAD {
  for (ModelEntry e : {ModelEntry{"resnet20", build_resnet20}, ModelEntry{"resnet18", build_resnet18},
                       ModelEntry{"resnet50", build_resnet50}}) {
    e.has_norm = true;
    register_model(e);
  }
}

}  // namespace crumb::models
