// Channels-last cases (tests/ops/registry.h): image ops run in an NHWC plan (engine/plan/layout.h), so
// every mode (gradient check, 16-bit, accumulate, CPU against CUDA) covers their NHWC rows, the
// conversions at the regions' edges and the filters' conversion.
#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/layout.h"
#include "engine/ops/norm.h"
#include "engine/ops/pool.h"
#include "engine/plan/layout.h"
#include "tests/ops/registry.h"

namespace crumb::test {
namespace {

// The NHWC rewrite, which must have put the case's image ops in NHWC.
void channels_last(Graph& g) {
  CRUMB_CHECK(to_channels_last(g) > 0, "the channels-last rewrite added no conversion");
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    if (g.node(i).def->layouts == Layouts::Nhwc)
      CRUMB_CHECK(g.node(i).layout == Layout::NHWC, "layer '", g.node(i).name, "' is not NHWC");
}

ValueId conv_bn_relu(Graph& g, ValueId x, int channels, const std::string& name, int group) {
  BatchNormAttrs a;
  a.group = group;
  return nn::relu(g, nn::batch_norm2d(g, nn::conv2d(g, x, channels, 3, name + ".conv",
                                                    nn::ConvOptions().with_pad(1).with_bias(false)), name + ".bn", a),
                  name + ".relu");
}

}  // namespace

CRUMB_ON_LOAD {
  add_op_cases({
      {"NhwcConv2dStridePad", {3, 7, 6}, 3,
       [](Graph& g, ValueId x) { return nn::conv2d(g, x, 4, 3, "conv", nn::ConvOptions().with_stride(2).with_pad(1)); },
       channels_last},
      {"NhwcConv2d1x1NoBias", {4, 3, 5}, 2,
       [](Graph& g, ValueId x) {
         return nn::conv2d(g, x, 3, 1, "conv", nn::ConvOptions().with_bias(false));
       }, channels_last},
      // A residual connection: conv-BN-ReLU and the shortcut added, then max pooling; the input's
      // gradient (from the convolution and the shortcut) goes back through the conversion at the input.
      // (Two conv-BN-ReLUs in a row exceed the 16-bit modes' tolerance in NCHW too: a ReLU input within
      // rounding of 0 switches.)
      {"NhwcResidualBlock", {3, 6, 6}, 4,
       [](Graph& g, ValueId x) {
         const ValueId y = nn::add(g, conv_bn_relu(g, x, 3, "a", 2), x, "add");
         return nn::max_pool2d(g, y, 2, 2, "pool");
       },
       channels_last},
      {"NhwcAvgPoolGroupNormDropout", {4, 5, 5}, 3,
       [](Graph& g, ValueId x) {
         const ValueId h = nn::group_norm(g, nn::conv2d(g, x, 4, 3, "conv", nn::ConvOptions().with_pad(1)), 2, "gn");
         return nn::dropout(g, nn::avg_pool2d(g, h, 3, 2, "pool", 1), 0.25, "drop");
       },
       channels_last},
      // Global and adaptive average pooling end the region with 1x1 maps, which need no conversion.
      {"NhwcGlobalAvgPool", {3, 4, 4}, 2,
       [](Graph& g, ValueId x) {
         return nn::global_avg_pool(g, nn::conv2d(g, x, 5, 3, "conv", nn::ConvOptions().with_pad(1)), "gap");
       },
       channels_last},
      {"NhwcAdaptiveAvgPool", {2, 5, 7}, 2,
       [](Graph& g, ValueId x) {
         return nn::adaptive_avg_pool2d(g, nn::conv2d(g, x, 3, 3, "conv", nn::ConvOptions().with_pad(1)), 2, 3, "pool");
       },
       channels_last},
      // MobileNetV2's block: a depthwise convolution (its [K, 1, R, S] filter converted like any other),
      // BatchNorm and ReLU6 in NHWC, a pointwise convolution and LeakyReLU.
      {"NhwcDepthwiseRelu6", {4, 6, 6}, 4,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 2;
         const nn::ConvOptions depthwise = nn::ConvOptions().with_pad(1).with_bias(false).with_groups(4);
         const ValueId d = nn::batch_norm2d(g, nn::conv2d(g, x, 4, 3, "dw", depthwise), "bn", a);
         const ValueId h = nn::hardtanh(g, d, 0, 6, "relu6");
         return nn::leaky_relu(g, nn::conv2d(g, h, 3, 1, "pw"), 0.1, "lrelu");
       },
       channels_last},
      // The conversions on their own, as a model would write them.
      {"ToNhwcAndBack", {3, 2, 4}, 2,
       [](Graph& g, ValueId x) {
         const ValueId h = nn::to_layout(g, nn::relu(g, x, "relu"), Layout::NHWC, "nhwc");
         return nn::to_layout(g, h, Layout::NCHW, "nchw");
       }},
  });
}

}  // namespace crumb::test
