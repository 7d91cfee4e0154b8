// The ReLU epilogue's cases (tests/ops/registry.h, engine/ops/relu_epilogue.h): each builds a convolution or
// linear layer followed by a ReLU and fuses it after autograd, so every mode runs the op with its epilogue
// (and autograd's ReLU backward reading the fused output), and checks that the fusion took place. The
// convolutions' shapes take the CPU kernel's different paths (3x3, pointwise, strided, grouped).
#include <string>

#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/graph/fusion.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/plan/layout.h"
#include "tests/ops/registry.h"

namespace crumb::test {
namespace {

// Fuses g and checks that `layer` computes its ReLU and no forward ReLU is left.
void fused_into(Graph& g, const std::string& layer) {
  CRUMB_CHECK(fuse(g) > 0, "nothing was fused");
  bool found = false;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    CRUMB_CHECK(n.def != &kRelu, "layer '", n.name, "' is still a ReLU of its own");
    found = found || n.name == layer + "+relu";
  }
  CRUMB_CHECK(found, "no step '", layer, "+relu' after fusion");
}

// conv -> relu -> a second convolution, whose backward takes the masked gradient.
ValueId conv_relu_conv(Graph& g, ValueId x, int kernel, int stride, int pad, int groups) {
  const auto options = nn::ConvOptions().with_stride(stride).with_pad(pad).with_groups(groups);
  const ValueId h = nn::relu(g, nn::conv2d(g, x, 4, kernel, "conv", options), "relu");
  return nn::conv2d(g, h, 3, 3, "conv2", nn::ConvOptions().with_pad(1));
}

}  // namespace

CRUMB_ON_LOAD {
  add_op_cases({
      {"FusedConvRelu", {2, 5, 5}, 3, [](Graph& g, ValueId x) { return conv_relu_conv(g, x, 3, 1, 1, 1); },
       [](Graph& g) { fused_into(g, "conv"); }},
      {"FusedConvReluPointwise", {3, 4, 4}, 4, [](Graph& g, ValueId x) { return conv_relu_conv(g, x, 1, 1, 0, 1); },
       [](Graph& g) { fused_into(g, "conv"); }},
      {"FusedConvReluStrided", {2, 7, 7}, 3, [](Graph& g, ValueId x) { return conv_relu_conv(g, x, 3, 2, 1, 1); },
       [](Graph& g) { fused_into(g, "conv"); }},
      {"FusedConvReluGrouped", {4, 5, 5}, 2, [](Graph& g, ValueId x) { return conv_relu_conv(g, x, 3, 1, 1, 2); },
       [](Graph& g) { fused_into(g, "conv"); }},
      // Winograd (forced on the CPU) has no epilogue in its output transform: its ReLU is a pass of its own.
      {"FusedConvReluWinograd", {3, 6, 5}, 3,
       [](Graph& g, ValueId x) {
         g.set_conv_algo(Graph::ConvAlgo::Winograd);
         return conv_relu_conv(g, x, 3, 1, 1, 1);
       },
       [](Graph& g) { fused_into(g, "conv"); }},
      {"FusedLinearRelu", {2, 3, 3}, 5,
       [](Graph& g, ValueId x) {
         const ValueId h = nn::relu(g, nn::linear(g, nn::flatten(g, x, "flat"), 7, "fc"), "relu");
         return nn::linear(g, h, 3, "fc2");
       },
       [](Graph& g) { fused_into(g, "fc"); }},
      // Channels-last: the fused convolution runs NHWC on CUDA (cuDNN), its epilogue elementwise.
      {"NhwcFusedConvRelu", {3, 6, 6}, 4, [](Graph& g, ValueId x) { return conv_relu_conv(g, x, 3, 1, 1, 1); },
       [](Graph& g) {
         fused_into(g, "conv");
         CRUMB_CHECK(to_channels_last(g) > 0, "the channels-last rewrite added no conversion");
       }},
  });
}

}  // namespace crumb::test
