// Dropout's op cases (tests/ops/registry.h).
#include "engine/base/registry.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/dropout.h"
#include "engine/ops/linear.h"
#include "tests/ops/registry.h"

namespace crumb::test {

CRUMB_ON_LOAD {
  add_op_cases({
      // Every run of a case uses the executor's default key, so the mask is fixed across the finite
      // differences and both micro-batches of the accumulate test (tests/dropout_test.cc varies it).
      {"Dropout", {12}, 3, [](Graph& g, ValueId x) { return nn::dropout(g, nn::linear(g, x, 10, "fc"), 0.4, "drop"); }},
      {"DropoutOnImages", {2, 4, 4}, 2,
       [](Graph& g, ValueId x) {
         return nn::dropout(g, nn::conv2d(g, x, 3, 3, "conv", nn::ConvOptions().with_pad(1)), 0.5, "drop");
       }}
  });
}

}  // namespace crumb::test
