// The normalisation ops' cases (tests/ops/registry.h), with BatchNorm's recomputation (batch_norm_apply).
#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/strategy/recompute.h"
#include "tests/ops/registry.h"

namespace crumb::test {

CRUMB_ON_LOAD {
  add_op_cases({
      // Normalisation after a convolution, so x, w and b are not all 1s and 0s at the layer. Groups of
      // 2, 2 and a ragged 1 sample.
      {"BatchNormGroupsRagged", {2, 4, 3}, 5,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 2;
         return nn::batch_norm2d(g, nn::conv2d(g, x, 3, 3, "conv", nn::ConvOptions().with_pad(1)), "bn", a);
       }},
      {"BatchNormWholeMicroBatch", {3, 3, 4}, 4,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 0;
         return nn::batch_norm2d(g, nn::conv2d(g, x, 2, 3, "conv", nn::ConvOptions().with_pad(1)), "bn", a);
       }},
      // hw = 1 (a 1x1 feature map): statistics over the group's samples alone.
      {"BatchNormOnePixel", {4, 1, 1}, 6,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 3;
         return nn::linear(g, nn::flatten(g, nn::batch_norm2d(g, x, "bn", a), "flat"), 3, "fc");
       }},
      // Normalised with (non-trivial) running statistics: PyTorch's eval() mode, differentiated.
      {"BatchNormFrozen", {2, 3, 3}, 3, frozen_conv_bn},
      {"GroupNorm", {4, 3, 3}, 3,
       [](Graph& g, ValueId x) {
         return nn::group_norm(g, nn::conv2d(g, x, 4, 3, "conv", nn::ConvOptions().with_pad(1)), 2, "gn");
       }},
      // One channel per group (InstanceNorm) and one group (LayerNorm over c, h, w).
      {"GroupNormPerChannel", {3, 4, 2}, 2, [](Graph& g, ValueId x) { return nn::group_norm(g, x, 3, "gn"); }},
      {"GroupNormOneGroup", {3, 4, 2}, 2, [](Graph& g, ValueId x) { return nn::group_norm(g, x, 1, "gn"); }},
      // A recomputed BatchNorm -> ReLU (batch_norm_apply and a ReLU clone in the backward pass): the same
      // gradients as kept values.
      {"BatchNormReluRecomputed", {2, 4, 4}, 5,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 2;
         return nn::relu(g, nn::batch_norm2d(g, nn::conv2d(g, x, 3, 3, "conv",
                                                           nn::ConvOptions().with_pad(1)), "bn", a), "relu");
       },
       [](Graph& g) {
         CRUMB_CHECK(recompute(g, all_recomputable(g)) >= 2, "op case BatchNormReluRecomputed: fewer than 2 values (BatchNorm, ReLU) were recomputed");
       }}
  });
}

}  // namespace crumb::test
