// Graph rewrites that leave every output and gradient unchanged, applied to a forward graph before
// autograd.
#pragma once
#include "engine/graph/graph.h"

namespace crumb {

// relu -> max_pool2d becomes max_pool2d -> relu where the ReLU's output feeds only the pool: max
// commutes with a monotone function and padding never wins a max, so the results are identical
// (forward and backward), while ReLU and its backward touch kh*kw times fewer elements and the
// full-size ReLU output no longer has to be kept for the backward pass. Returns the rewrites made.
int reorder_relu_max_pool(Graph& g);

// All of the above; what models::build applies.
void optimize_graph(Graph& g);

}  // namespace crumb
