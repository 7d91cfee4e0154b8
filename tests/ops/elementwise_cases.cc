// The elementwise ops' cases (tests/ops/registry.h).
#include "engine/base/registry.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "tests/ops/registry.h"

namespace crumb::test {

CRUMB_ON_LOAD {
  add_op_cases({
      {"Relu", {8}, 3, [](Graph& g, ValueId x) { return nn::relu(g, nn::linear(g, x, 6, "fc"), "relu"); }},
      {"LeakyRelu", {8}, 3,
       [](Graph& g, ValueId x) { return nn::leaky_relu(g, nn::linear(g, x, 6, "fc"), 0.1, "lrelu"); }},
      // Bounds inside the linear layer's range, so that values fall below, between and above them.
      {"Hardtanh", {8}, 4,
       [](Graph& g, ValueId x) { return nn::hardtanh(g, nn::linear(g, x, 6, "fc"), -0.2, 0.3, "clamp"); }},
      // In place on each other: the backward of each reads its own output only.
      {"LeakyReluThenRelu6", {6}, 3,
       [](Graph& g, ValueId x) {
         const ValueId h = nn::leaky_relu(g, nn::linear(g, x, 5, "fc"), 0.2, "lrelu");
         return nn::hardtanh(g, h, 0, 6, "relu6");
       }},
      // h feeds both the add and the relu: its gradient is the sum of two contributions.
      {"AddWithSharedInputSumsGradients", {6}, 2,
       [](Graph& g, ValueId x) {
         const ValueId h = nn::linear(g, x, 5, "fc");
         return nn::add(g, h, nn::relu(g, h, "relu"), "add");
       }},
      {"FlattenOfConv", {1, 5, 5}, 2,
       [](Graph& g, ValueId x) {
         return nn::linear(g, nn::flatten(g, nn::conv2d(g, x, 2, 3, "conv"), "flat"), 3, "fc");
       }}
  });
}

}  // namespace crumb::test
