// The values a training pass keeps from its forward part to its backward part: what swapping and
// recomputation (engine/strategy/swap.h, engine/strategy/recompute.h) can take out of the arena. Positions are node ids,
// which are the training pass's execution order.
#pragma once
#include <vector>

#include "engine/graph/graph.h"

namespace crumb {

struct SavedValue {
  ValueId value = -1;
  int produced = -1;        // the forward node computing it
  int last_forward = -1;    // the last forward node reading it (produced if none)
  int first_backward = -1;  // the first and last backward nodes reading it
  int last_backward = -1;
};

// Every forward-computed Activation of the graph's float dtype that a backward node reads, in the order
// they are computed; the loss is left out (it is read after the run).
std::vector<SavedValue> saved_values(const Graph& g);

// The position of the first backward node (the number of nodes if there is none).
int first_backward_node(const Graph& g);

}  // namespace crumb
