// The pooling ops' cases (tests/ops/registry.h).
#include "engine/base/registry.h"
#include "engine/ops/pool.h"
#include "tests/ops/registry.h"

namespace crumb::test {

CRUMB_ON_LOAD {
  add_op_cases({
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
       [](Graph& g, ValueId x) { return nn::adaptive_avg_pool2d(g, x, 7, 7, "pool"); }}
  });
}

}  // namespace crumb::test
