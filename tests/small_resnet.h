// resnet20 on 3x8x8 inputs, 5 classes, BatchNorm groups of 8, with its backward, fused as train fuses it:
// the graph the frontier and cost model tests plan and time (small enough to run in milliseconds).
#pragma once

#include "engine/graph/autograd.h"
#include "engine/graph/fusion.h"
#include "engine/train/model_registry.h"

namespace crumb::test {

inline Graph small_resnet20() {
  models::NormSpec norm;
  norm.bn.group = 8;
  Graph g = models::build("resnet20", {3, 8, 8, 5, norm});
  build_backward(g);
  fuse(g);
  return g;
}

}  // namespace crumb::test
