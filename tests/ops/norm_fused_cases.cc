// The fused normalisation ops' cases (tests/ops/registry.h): each case builds the unfused chain and fuses it
// (engine/graph/fusion.h) after autograd, so every mode runs the fused forward and backward, and checks that
// the fusion took place. Channels-last and recomputed variants cover the NHWC rows and batch_norm_apply_relu.
#include <initializer_list>
#include <string>

#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/graph/fusion.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/plan/layout.h"
#include "engine/strategy/recompute.h"
#include "tests/ops/registry.h"

namespace crumb::test {
namespace {

// Fuses g and checks that each of `ops` runs in it.
void fused(Graph& g, std::initializer_list<const OpDef*> ops) {
  CRUMB_CHECK(fuse(g) > 0, "nothing was fused");
  for (const OpDef* op : ops) {
    bool found = false;
    for (NodeId i = 0; i < g.num_nodes(); ++i) found = found || g.node(i).def == op;
    CRUMB_CHECK(found, "no ", op->name, " after fusion");
  }
}

// conv -> BatchNorm (groups of 2: with 5 samples, a ragged last group) -> [add r] -> relu.
ValueId conv_bn_relu(Graph& g, ValueId x, ValueId residual_of_x) {
  BatchNormAttrs a;
  a.group = 2;
  ValueId h = nn::batch_norm2d(g, nn::conv2d(g, x, 3, 3, "conv", nn::ConvOptions().with_pad(1)), "bn", a);
  if (residual_of_x >= 0) h = nn::add(g, h, residual_of_x, "add");
  return nn::relu(g, h, "relu");
}

void fused_bn(Graph& g) { fused(g, {&kBatchNormRelu, &kBatchNormReluBwd}); }
void fused_bn_add(Graph& g) { fused(g, {&kBatchNormAddRelu, &kBatchNormAddReluBwd}); }

}  // namespace

CRUMB_ON_LOAD {
  add_op_cases({
      {"FusedBatchNormRelu", {2, 4, 3}, 5, [](Graph& g, ValueId x) { return conv_bn_relu(g, x, -1); }, fused_bn},
      // The residual is a ReLU of a second convolution of x (the ReLU's backward reads it anyway), so x's
      // gradient sums both paths.
      {"FusedBatchNormAddRelu", {2, 4, 3}, 5,
       [](Graph& g, ValueId x) {
         return conv_bn_relu(g, x, nn::relu(g, nn::conv2d(g, x, 3, 1, "shortcut"), "shortcut.relu"));
       },
       fused_bn_add},
      // A residual no backward node reads (a convolution's output): the fused backward's mask needs it not.
      {"FusedBatchNormAddReluConvResidual", {2, 4, 3}, 5,
       [](Graph& g, ValueId x) { return conv_bn_relu(g, x, nn::conv2d(g, x, 3, 1, "shortcut")); }, fused_bn_add},
      // The normalised value second in the add, the residual x itself, the whole micro-batch one group.
      {"FusedBatchNormAddReluResidualFirst", {3, 3, 4}, 4,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 0;
         const ValueId h = nn::batch_norm2d(g, nn::conv2d(g, x, 3, 3, "conv", nn::ConvOptions().with_pad(1)), "bn", a);
         return nn::relu(g, nn::add(g, x, h, "add"), "relu");
       },
       fused_bn_add},
      // 1x1 maps (a ResNet's last stage on small images): statistics over the group's samples alone.
      {"FusedBatchNormReluOnePixel", {4, 1, 1}, 6,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 3;
         const ValueId h = nn::relu(g, nn::batch_norm2d(g, nn::conv2d(g, x, 4, 1, "conv"), "bn", a), "relu");
         return nn::linear(g, nn::flatten(g, h, "flat"), 3, "fc");
       },
       fused_bn},
      // Normalised with running statistics (PyTorch's eval() layer), differentiated.
      {"FusedBatchNormReluFrozen", {2, 3, 3}, 3,
       [](Graph& g, ValueId x) { return nn::relu(g, frozen_conv_bn(g, x), "relu"); }, fused_bn},
      // A recomputed fused forward: batch_norm_apply_relu in the backward pass (the fused backward reads the
      // recomputed y), the residual's BatchNorm recomputed with it.
      {"FusedBatchNormAddReluRecomputed", {2, 4, 4}, 5,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 2;
         const ValueId r = nn::batch_norm2d(g, nn::conv2d(g, x, 3, 1, "shortcut"), "shortcut.bn", a);
         return conv_bn_relu(g, x, r);
       },
       [](Graph& g) {
         fused_bn_add(g);
         CRUMB_CHECK(recompute(g, all_recomputable(g)) >= 2, "fewer than 2 values were recomputed");
         bool apply = false;
         for (NodeId i = 0; i < g.num_nodes(); ++i) apply = apply || g.node(i).def == &kBatchNormApplyRelu;
         CRUMB_CHECK(apply, "no batch_norm_apply_relu after recomputation");
       }},
      {"FusedGroupNormRelu", {4, 3, 3}, 3,
       [](Graph& g, ValueId x) {
         return nn::relu(g, nn::group_norm(g, nn::conv2d(g, x, 4, 3, "conv",
                                                         nn::ConvOptions().with_pad(1)), 2, "gn"), "relu");
       },
       [](Graph& g) { fused(g, {&kGroupNormRelu, &kGroupNormReluBwd}); }},
      {"FusedGroupNormAddRelu", {4, 3, 3}, 3,
       [](Graph& g, ValueId x) {
         const ValueId h = nn::group_norm(g, nn::conv2d(g, x, 4, 3, "conv", nn::ConvOptions().with_pad(1)), 2, "gn");
         return nn::relu(g, nn::add(g, h, x, "add"), "relu");
       },
       [](Graph& g) { fused(g, {&kGroupNormAddRelu, &kGroupNormAddReluBwd}); }},
      // Channels-last: BatchNorm's fused rows run NHWC natively on CUDA; GroupNorm's on NCHW copies.
      {"NhwcFusedBatchNormAddRelu", {3, 6, 6}, 4, [](Graph& g, ValueId x) { return conv_bn_relu(g, x, x); },
       [](Graph& g) {
         fused_bn_add(g);
         CRUMB_CHECK(to_channels_last(g) > 0, "the channels-last rewrite added no conversion");
       }},
      {"NhwcFusedBatchNormRelu", {3, 6, 6}, 4, [](Graph& g, ValueId x) { return conv_bn_relu(g, x, -1); },
       [](Graph& g) {
         fused_bn(g);
         CRUMB_CHECK(to_channels_last(g) > 0, "the channels-last rewrite added no conversion");
       }},
      {"NhwcFusedGroupNormRelu", {4, 5, 5}, 3,
       [](Graph& g, ValueId x) {
         return nn::relu(g, nn::group_norm(g, nn::conv2d(g, x, 4, 3, "conv",
                                                         nn::ConvOptions().with_pad(1)), 2, "gn"), "relu");
       },
       [](Graph& g) {
         fused(g, {&kGroupNormRelu, &kGroupNormReluBwd});
         CRUMB_CHECK(to_channels_last(g) > 0, "the channels-last rewrite added no conversion");
       }},
  });
}

}  // namespace crumb::test
