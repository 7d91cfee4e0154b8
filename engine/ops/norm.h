// Normalisation on NCHW: BatchNorm over groups of samples, GroupNorm over groups of channels, each with a
// per-channel affine (weight, bias).
#pragma once
#include <cstdint>
#include <string>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"
#include "kernels/cpu/shapes.h"

namespace crumb {

extern const OpDef kBatchNorm, kBatchNormBwd, kBatchNormApply, kGroupNorm, kGroupNormBwd;
// The fused ops (engine/ops/norm_fused.cc), which the fusion pass (engine/graph/fusion.h) puts in place of
// normalisation -> ReLU and normalisation -> add -> ReLU chains and their backward nodes:
// - kBatchNormRelu, kBatchNormAddRelu: in = BatchNorm's (x, weight, bias, running_mean, running_var,
//   num_batches_tracked) and, with the add, the residual r; out = (y, stats, moments), y = relu(bn(x) [+ r]);
// - kBatchNormReluBwd: in = (dy, x, weight, stats, y), out = (dweight, dbias[, dx]), ReLU's backward
//   folded in, its mask where y > 0; kBatchNormAddReluBwd: the same inputs, out = (dr, dweight, dbias[, dx]),
//   dr (the residual's gradient, the masked dy) in place of dy;
// - kBatchNormApplyRelu: in = (x, weight, bias, stats[, r]), out = y: a recomputation of the fused forward
//   (In-Place memory, engine/strategy/in_place.h);
// - kGroupNormRelu, kGroupNormAddRelu, kGroupNormReluBwd, kGroupNormAddReluBwd: the same for GroupNorm,
//   whose forward in and out are GroupNorm's (x, weight, bias[, r]) -> (y, stats).
extern const OpDef kBatchNormRelu, kBatchNormAddRelu, kBatchNormReluBwd, kBatchNormAddReluBwd, kBatchNormApplyRelu;
extern const OpDef kGroupNormRelu, kGroupNormAddRelu, kGroupNormReluBwd, kGroupNormAddReluBwd;

// How BatchNorm updates its running statistics in training (--bn-stats).
enum class BnStats : uint8_t {
  Deferred,  // the whole batch's mean and variance, merged exactly over its groups: one update per step
  PerGroup,  // one update per group, as PyTorch does per forward under gradient accumulation
};
struct BatchNormAttrs {
  int group = 32;  // samples per normalisation group; 0: the whole micro-batch is one group
  BnStats stats = BnStats::Deferred;
  bool frozen = false;  // normalise with the running statistics in training too (PyTorch's eval() layer)
  double eps = 1e-5, momentum = 0.1;
};
struct GroupNormAttrs {
  int groups = 32;  // channel groups; must divide the channels
  double eps = 1e-5;
};

// What BatchNorm asks of the micro-batches of a training batch: every one but the batch's last must hold
// whole normalisation groups, so the result does not depend on the micro-batch size. Returns the sample
// count micro-batches must be a multiple of (1 without BatchNorm, the least common multiple of the
// layers' groups), or 0 when a layer normalises a whole micro-batch: the batch must then run as one.
int micro_batch_multiple(const Graph& g);

// The attributes of a node that normalises over groups of samples in training, BatchNorm's forward plain
// or fused; null for every other node.
const BatchNormAttrs* batch_norm_attrs(const Node& n);

namespace ops {
// A BatchNorm step's kernel shape at its batch (group 0, the whole micro-batch, becomes n).
cpu::BatchNormShape batch_norm_shape(const StepArgs& a);
}  // namespace ops

namespace nn {
// BatchNorm2d with PyTorch's names and starting values: weight 1, bias 0, running_mean 0, running_var 1,
// num_batches_tracked 0 (I64).
ValueId batch_norm2d(Graph& g, ValueId x, const std::string& name, const BatchNormAttrs& attrs = {});
// GroupNorm(groups, channels): weight 1, bias 0.
ValueId group_norm(Graph& g, ValueId x, int groups, const std::string& name, double eps = 1e-5);
}  // namespace nn

}  // namespace crumb
