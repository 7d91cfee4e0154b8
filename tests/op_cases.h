// The op test cases: one row per case, and every row runs in every mode, on every backend:
// - OpGradCheck (tests/gradcheck_test.cc): float64 gradients against central finite differences;
// - OpParity (tests/ops_test.cc): float32 on the CPU against CUDA;
// - OpAccumulate (tests/ops_test.cc): gradient buffers full of garbage are overwritten by a batch's
//   first micro-batch and added to exactly by the next, on the CPU and on CUDA.
// Adding an op adds a row here. A row builds only the ops under test; op_graph() puts the same graph
// around every body, so each mode runs the op through the real autograd, planner and executor.
#pragma once
#include <algorithm>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/graph/autograd.h"
#include "engine/graph/graph.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/graph/op.h"
#include "engine/strategy/recompute.h"
#include "engine/graph/saved_values.h"
#include "engine/strategy/swap.h"

namespace crumb::test {

struct OpCase {
  const char* name;  // the test's name in every mode
  Dims x_dims;       // per-sample dims of the input x
  int batch;
  // Builds the ops under test on x; returns their output (op_graph flattens it if it is not 1-D).
  std::function<ValueId(Graph&, ValueId)> body;
  // A memory-strategy rewrite applied after autograd (swap, recompute), if any: their ops run in every mode.
  std::function<void(Graph&)> rewrite = nullptr;
};

// Every saved value that can be recomputed without keeping another value longer or running a convolution
// or a linear layer again (recomputing those too recomputes whole chains: tests/swap_recompute_test.cc).
inline std::vector<ValueId> all_recomputable(const Graph& g) {
  std::vector<bool> saved(g.num_values(), false), chosen(g.num_values(), false);
  for (const SavedValue& s : saved_values(g)) saved[s.value] = true;
  for (const SavedValue& s : saved_values(g)) {
    const std::vector<ValueId> closure = recompute_closure(g, s.value, saved);
    if (std::none_of(closure.begin(), closure.end(), [&](ValueId v) {
          const OpDef* def = g.node(g.value(v).producer).def;
          return def == &kConv2d || def == &kLinear;
        }))
      for (ValueId v : closure) chosen[v] = true;
  }
  std::vector<ValueId> out;
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (chosen[v]) out.push_back(v);
  return out;
}

inline std::vector<ValueId> all_saved(const Graph& g) {
  std::vector<ValueId> out;
  for (const SavedValue& s : saved_values(g)) out.push_back(s.value);
  return out;
}

// Swap settings for tests: a node and a copy take one unit of time each; `window` bytes may be prefetched.
inline SwapTiming swap_window(std::size_t window) {
  SwapTiming t;
  t.window_bytes = window;
  return t;
}

inline const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = {
      {"Linear", {5}, 3, [](Graph& g, ValueId x) { return nn::linear(g, x, 4, "fc"); }},
      // Sizes that are no multiple of a vector width or a GEMM tile.
      {"LinearOddSizes", {37}, 5, [](Graph& g, ValueId x) { return nn::linear(g, x, 13, "fc"); }},
      {"LinearNoBias", {6}, 2, [](Graph& g, ValueId x) { return nn::linear(g, x, 3, "fc", false); }},
      {"LinearNoBiasBatch3", {6}, 3, [](Graph& g, ValueId x) { return nn::linear(g, x, 4, "fc", false); }},
      {"Conv2dStridePad", {2, 7, 6}, 3, [](Graph& g, ValueId x) { return nn::conv2d(g, x, 3, 3, 2, 1, "conv"); }},
      {"Conv2dNoBias5x5", {3, 8, 8}, 2,
       [](Graph& g, ValueId x) { return nn::conv2d(g, x, 2, 5, 1, 2, "conv", false); }},
      {"Conv2d1x1", {4, 3, 5}, 2, [](Graph& g, ValueId x) { return nn::conv2d(g, x, 3, 1, 1, 0, "conv"); }},
      // Feature maps smaller than the kernel's reach (ResNet-18's last stage on 28x28 images): most
      // kernel taps see only padding.
      {"Conv2d3x3On1x1", {3, 1, 1}, 2, [](Graph& g, ValueId x) { return nn::conv2d(g, x, 2, 3, 1, 1, "conv"); }},
      {"Conv2d3x3On2x1", {2, 2, 1}, 2, [](Graph& g, ValueId x) { return nn::conv2d(g, x, 2, 3, 1, 1, "conv"); }},
      // Maps under 128 pixels run blocks of samples through one GEMM: several blocks and a ragged one
      // (4x4: blocks of 8), pointwise (3x3: blocks of 15), strided (3x3 output: blocks of 15).
      {"Conv2dBlockedSmallMaps", {3, 4, 4}, 11,
       [](Graph& g, ValueId x) { return nn::conv2d(g, x, 5, 3, 1, 1, "conv"); }},
      {"Conv2dBlockedPointwise", {4, 3, 3}, 17, [](Graph& g, ValueId x) { return nn::conv2d(g, x, 3, 1, 1, 0, "conv"); }},
      {"Conv2dBlockedStrided", {2, 5, 5}, 18,
       [](Graph& g, ValueId x) { return nn::conv2d(g, x, 3, 3, 2, 1, "conv", false); }},
      // Enough work for two threads: blocks inside each thread's slice of samples.
      {"Conv2dBlockedThreaded", {16, 8, 8}, 8,
       [](Graph& g, ValueId x) { return nn::conv2d(g, x, 16, 3, 1, 1, "conv"); }},
      {"MaxPool", {2, 6, 6}, 2, [](Graph& g, ValueId x) { return nn::max_pool2d(g, x, 2, 2, "pool"); }},
      {"MaxPoolOverlappingPadded", {2, 7, 5}, 2,
       [](Graph& g, ValueId x) { return nn::max_pool2d(g, x, 3, 2, "pool", 1); }},
      {"AvgPoolPadded", {2, 7, 6}, 2, [](Graph& g, ValueId x) { return nn::avg_pool2d(g, x, 3, 2, "pool", 1); }},
      {"GlobalAvgPool", {3, 4, 5}, 2, [](Graph& g, ValueId x) { return nn::global_avg_pool(g, x, "gap"); }},
      // Overlapping bins (7 rows into 3 bins: [0, 3), [2, 5), [4, 7)), and upsampling: 2x3 -> 5x4 repeats
      // cells, 1x1 -> 7x7 (torchvision's VGG on 32x32 images) copies one cell everywhere.
      {"AdaptiveAvgPoolOverlapping", {2, 7, 5}, 2,
       [](Graph& g, ValueId x) { return nn::adaptive_avg_pool2d(g, x, 3, 2, "pool"); }},
      {"AdaptiveAvgPoolUpsample", {2, 2, 3}, 2,
       [](Graph& g, ValueId x) { return nn::adaptive_avg_pool2d(g, x, 5, 4, "pool"); }},
      {"AdaptiveAvgPool1x1To7x7", {3, 1, 1}, 2,
       [](Graph& g, ValueId x) { return nn::adaptive_avg_pool2d(g, x, 7, 7, "pool"); }},
      // Every run of a case uses the executor's default key, so the mask is fixed across the finite
      // differences and both micro-batches of the accumulate test (tests/dropout_test.cc varies it).
      {"Dropout", {12}, 3, [](Graph& g, ValueId x) { return nn::dropout(g, nn::linear(g, x, 10, "fc"), 0.4, "drop"); }},
      {"DropoutOnImages", {2, 4, 4}, 2,
       [](Graph& g, ValueId x) { return nn::dropout(g, nn::conv2d(g, x, 3, 3, 1, 1, "conv"), 0.5, "drop"); }},
      // Normalisation after a convolution, so x, w and b are not all 1s and 0s at the layer. Groups of
      // 2, 2 and a ragged 1 sample.
      {"BatchNormGroupsRagged", {2, 4, 3}, 5,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 2;
         return nn::batch_norm2d(g, nn::conv2d(g, x, 3, 3, 1, 1, "conv"), "bn", a);
       }},
      {"BatchNormWholeMicroBatch", {3, 3, 4}, 4,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 0;
         return nn::batch_norm2d(g, nn::conv2d(g, x, 2, 3, 1, 1, "conv"), "bn", a);
       }},
      // hw = 1 (a 1x1 feature map): statistics over the group's samples alone.
      {"BatchNormOnePixel", {4, 1, 1}, 6,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 3;
         return nn::linear(g, nn::flatten(g, nn::batch_norm2d(g, x, "bn", a), "flat"), 3, "fc");
       }},
      // Normalised with (non-trivial) running statistics: PyTorch's eval() mode, differentiated.
      {"BatchNormFrozen", {2, 3, 3}, 3,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.frozen = true;
         const ValueId h = nn::batch_norm2d(g, nn::conv2d(g, x, 3, 3, 1, 1, "conv"), "bn", a);
         g.value(g.find_value("bn.running_mean")).init.fill = 0.3;
         g.value(g.find_value("bn.running_var")).init.fill = 2.5;
         return h;
       }},
      {"GroupNorm", {4, 3, 3}, 3,
       [](Graph& g, ValueId x) { return nn::group_norm(g, nn::conv2d(g, x, 4, 3, 1, 1, "conv"), 2, "gn"); }},
      // One channel per group (InstanceNorm) and one group (LayerNorm over c, h, w).
      {"GroupNormPerChannel", {3, 4, 2}, 2, [](Graph& g, ValueId x) { return nn::group_norm(g, x, 3, "gn"); }},
      {"GroupNormOneGroup", {3, 4, 2}, 2, [](Graph& g, ValueId x) { return nn::group_norm(g, x, 1, "gn"); }},
      {"Relu", {8}, 3, [](Graph& g, ValueId x) { return nn::relu(g, nn::linear(g, x, 6, "fc"), "relu"); }},
      // h feeds both the add and the relu: its gradient is the sum of two contributions.
      {"AddWithSharedInputSumsGradients", {6}, 2,
       [](Graph& g, ValueId x) {
         const ValueId h = nn::linear(g, x, 5, "fc");
         return nn::add(g, h, nn::relu(g, h, "relu"), "add");
       }},
      {"FlattenOfConv", {1, 5, 5}, 2,
       [](Graph& g, ValueId x) {
         return nn::linear(g, nn::flatten(g, nn::conv2d(g, x, 2, 3, 1, 0, "conv"), "flat"), 3, "fc");
       }},
      // The same linear layer applied twice: both backward nodes write one parameter gradient (the
      // second always adds).
      {"SharedWeightsAccumulate", {4}, 2,
       [](Graph& g, ValueId x) {
         const ValueId h = nn::relu(g, nn::linear(g, x, 4, "fc"), "r1");
         Node n;
         n.def = &kLinear;
         n.name = "fc_again";
         n.in = {h, g.find_value("fc.weight"), g.find_value("fc.bias")};
         Value out;
         out.name = "fc_again";
         out.dtype = g.float_dtype();
         out.batched = true;
         out.requires_grad = true;
         n.out = {g.add_value(out)};
         g.add_node(n);
         return n.out[0];
       }},
      // A recomputed BatchNorm -> ReLU (batch_norm_apply and a ReLU clone in the backward pass), and every
      // saved value swapped out and back (swap_copy, swap_wait): the same gradients as kept values.
      {"BatchNormReluRecomputed", {2, 4, 4}, 5,
       [](Graph& g, ValueId x) {
         BatchNormAttrs a;
         a.group = 2;
         return nn::relu(g, nn::batch_norm2d(g, nn::conv2d(g, x, 3, 3, 1, 1, "conv"), "bn", a), "relu");
       },
       [](Graph& g) {
         if (recompute(g, all_recomputable(g)) < 2) ADD_FAILURE() << "BatchNorm and ReLU should be recomputed";
       }},
      {"ConvReluSwapped", {2, 5, 5}, 3,
       [](Graph& g, ValueId x) {
         return nn::conv2d(g, nn::relu(g, nn::conv2d(g, x, 3, 3, 1, 1, "conv1"), "relu"), 2, 3, 1, 1, "conv2");
       },
       [](Graph& g) {
         if (swap(g, all_saved(g), 3, swap_window(1 << 20)).swapped.empty()) ADD_FAILURE() << "nothing was swapped";
       }},
  };
  return cases;
}

// input x (requires_grad) -> body -> flatten (if not 1-D) -> softmax cross-entropy against labels y, in
// the float dtype (F64 for gradient checks, F32 to compare devices), with its backward graph.
inline Graph op_graph(const OpCase& c, DType dtype) {
  Graph g;
  g.set_float_dtype(dtype);
  const ValueId x = g.input("x", c.x_dims, dtype, /*requires_grad=*/true);
  const ValueId y = g.input("y", {}, DType::I32);
  ValueId h = c.body(g, x);
  if (g.value(h).dims.size() != 1) h = nn::flatten(g, h, "flat");
  nn::softmax_cross_entropy(g, h, y, "loss");
  build_backward(g);
  if (c.rewrite) c.rewrite(g);
  return g;
}

// Test names are case names; GoogleTest prints a failing case by its name.
inline std::string op_case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

}  // namespace crumb::test
