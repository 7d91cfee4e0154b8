// The linear layer's op cases (tests/ops/registry.h).
#include "engine/base/registry.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "tests/ops/registry.h"

namespace crumb::test {

CRUMB_ON_LOAD {
  add_op_cases({
      {"Linear", {5}, 3, [](Graph& g, ValueId x) { return nn::linear(g, x, 4, "fc"); }},
      // Sizes that are no multiple of a vector width or a GEMM tile.
      {"LinearOddSizes", {37}, 5, [](Graph& g, ValueId x) { return nn::linear(g, x, 13, "fc"); }},
      {"LinearNoBias", {6}, 2, [](Graph& g, ValueId x) { return nn::linear(g, x, 3, "fc", false); }},
      {"LinearNoBiasBatch3", {6}, 3, [](Graph& g, ValueId x) { return nn::linear(g, x, 4, "fc", false); }},
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
       }}
  });
}

}  // namespace crumb::test
