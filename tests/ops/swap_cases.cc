// The swap ops' cases (tests/ops/registry.h).
#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/strategy/swap.h"
#include "tests/ops/registry.h"

namespace crumb::test {

CRUMB_ON_LOAD {
  add_op_cases({
      // Every saved value swapped out and back (swap_copy, swap_wait): the same gradients as kept values.
      {"ConvReluSwapped", {2, 5, 5}, 3,
       [](Graph& g, ValueId x) {
         const ValueId h = nn::relu(g, nn::conv2d(g, x, 3, 3, "conv1", nn::ConvOptions().with_pad(1)), "relu");
         return nn::conv2d(g, h, 2, 3, "conv2", nn::ConvOptions().with_pad(1));
       },
       [](Graph& g) {
         CRUMB_CHECK(!swap(g, all_saved(g), 3, swap_window(1 << 20)).swapped.empty(), "op case ConvReluSwapped: no value was swapped");
       }}
  });
}

}  // namespace crumb::test
