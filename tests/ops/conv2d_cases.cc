// The convolution's op cases (tests/ops/registry.h).
#include "engine/base/registry.h"
#include "engine/ops/conv2d.h"
#include "tests/ops/registry.h"

namespace crumb::test {

CRUMB_ON_LOAD {
  add_op_cases({
      {"Conv2dStridePad", {2, 7, 6}, 3,
       [](Graph& g, ValueId x) {
         return nn::conv2d(g, x, 3, 3, "conv", nn::ConvOptions().with_stride(2).with_pad(1));
       }},
      {"Conv2dNoBias5x5", {3, 8, 8}, 2,
       [](Graph& g, ValueId x) {
         return nn::conv2d(g, x, 2, 5, "conv", nn::ConvOptions().with_pad(2).with_bias(false));
       }},
      {"Conv2d1x1", {4, 3, 5}, 2, [](Graph& g, ValueId x) { return nn::conv2d(g, x, 3, 1, "conv"); }},
      // Feature maps smaller than the kernel's reach (ResNet-18's last stage on 28x28 images): most
      // kernel taps see only padding.
      {"Conv2d3x3On1x1", {3, 1, 1}, 2,
       [](Graph& g, ValueId x) { return nn::conv2d(g, x, 2, 3, "conv", nn::ConvOptions().with_pad(1)); }},
      {"Conv2d3x3On2x1", {2, 2, 1}, 2,
       [](Graph& g, ValueId x) { return nn::conv2d(g, x, 2, 3, "conv", nn::ConvOptions().with_pad(1)); }},
      // Maps under 128 pixels run blocks of samples through one GEMM: several blocks and a ragged one
      // (4x4: blocks of 8), pointwise (3x3: blocks of 15), strided (3x3 output: blocks of 15).
      {"Conv2dBlockedSmallMaps", {3, 4, 4}, 11,
       [](Graph& g, ValueId x) { return nn::conv2d(g, x, 5, 3, "conv", nn::ConvOptions().with_pad(1)); }},
      {"Conv2dBlockedPointwise", {4, 3, 3}, 17, [](Graph& g, ValueId x) { return nn::conv2d(g, x, 3, 1, "conv"); }},
      {"Conv2dBlockedStrided", {2, 5, 5}, 18,
       [](Graph& g, ValueId x) {
         return nn::conv2d(g, x, 3, 3, "conv", nn::ConvOptions().with_stride(2).with_pad(1).with_bias(false));
       }},
      // Enough work for two threads: blocks inside each thread's slice of samples.
      {"Conv2dBlockedThreaded", {16, 8, 8}, 8,
       [](Graph& g, ValueId x) { return nn::conv2d(g, x, 16, 3, "conv", nn::ConvOptions().with_pad(1)); }},
      // Grouped: each group through the ungrouped kernels on copies of its channels (two groups, and
      // four of one output channel each on a 3x3 output map, conv2d_small.h's path).
      {"Conv2dGroups", {4, 6, 5}, 3,
       [](Graph& g, ValueId x) {
         return nn::conv2d(g, x, 6, 3, "conv", nn::ConvOptions().with_pad(1).with_groups(2));
       }},
      {"Conv2dGroupsStridedSmallMap", {8, 5, 5}, 5,
       [](Graph& g, ValueId x) {
         return nn::conv2d(g, x, 4, 3, "conv",
                           nn::ConvOptions().with_stride(2).with_pad(1).with_bias(false).with_groups(4));
       }},
      // Depthwise (one input channel per group): MobileNet's 3x3 with padding 1, strided, and with two
      // output channels per input channel, a 5x5 kernel wider than the padded edge.
      {"Conv2dDepthwise", {3, 6, 7}, 3,
       [](Graph& g, ValueId x) {
         return nn::conv2d(g, x, 3, 3, "conv", nn::ConvOptions().with_pad(1).with_groups(3));
       }},
      {"Conv2dDepthwiseStrided", {4, 7, 6}, 2,
       [](Graph& g, ValueId x) {
         return nn::conv2d(g, x, 4, 3, "conv",
                           nn::ConvOptions().with_stride(2).with_pad(1).with_bias(false).with_groups(4));
       }},
      {"Conv2dDepthwiseMultiplier5x5", {2, 6, 6}, 3,
       [](Graph& g, ValueId x) {
         return nn::conv2d(g, x, 4, 5, "conv", nn::ConvOptions().with_pad(1).with_groups(2));
       }},
      // Enough work for the depthwise loops to run threaded.
      {"Conv2dDepthwiseThreaded", {32, 24, 24}, 8,
       [](Graph& g, ValueId x) {
         return nn::conv2d(g, x, 32, 3, "conv", nn::ConvOptions().with_pad(1).with_bias(false).with_groups(32));
       }},
      // Winograd F(2x2, 3x3) forced on the CPU (engine/ops/conv2d_algo.h): odd map sizes (half-outside
      // tiles) with padding 1, and unpadded (the data gradient then pads dy by 2).
      {"Conv2dWinograd", {3, 7, 5}, 3,
       [](Graph& g, ValueId x) {
         g.set_conv_algo(Graph::ConvAlgo::Winograd);
         return nn::conv2d(g, x, 4, 3, "conv", nn::ConvOptions().with_pad(1));
       }},
      {"Conv2dWinogradNoPad", {2, 6, 7}, 2,
       [](Graph& g, ValueId x) {
         g.set_conv_algo(Graph::ConvAlgo::Winograd);
         return nn::conv2d(g, x, 3, 3, "conv", nn::ConvOptions().with_bias(false));
       }},
      // In 16 bits the CPU runs each pass in slices of 21 samples here (1 MiB of float32 copies,
      // engine/device/widen.h): a full slice and a ragged one, the weight gradient summed over both.
      {"Conv2dSixteenBitSlices", {1, 64, 64}, 24,
       [](Graph& g, ValueId x) { return nn::conv2d(g, x, 2, 3, "conv", nn::ConvOptions().with_pad(1)); }}
  });
}

}  // namespace crumb::test
