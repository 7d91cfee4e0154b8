// The order of a backward pass's branches. Where a value feeds two branches of the forward pass (a residual
// block's input: its convolutions and its downsampling shortcut), the backward pass sums the two gradients
// it gets, and build_backward runs the branches in the reverse of their forward order: the shortcut's first,
// whose gradient of the block's input then waits through the whole main branch for the sum. Running the
// shortcut's branch just before the sum instead holds that gradient for a few steps; what it costs is the
// gradients the branch reads, which live until then. The memory strategy's rewrites start from a graph
// reordered so where that holds less: the nodes run the same kernels on the same values, and the sum adds
// the same two gradients (a + b and b + a are the same bits), so the results do not change.
#pragma once

#include "engine/graph/graph.h"

namespace crumb {

// Moves, for each sum of two gradients in g's backward pass, the branch computing the one computed first
// (the nodes that compute it and read nothing else's, with the parameter gradients they feed) to just
// before the sum, where the gradient is larger than the gradients the branch reads that would live
// longer. Returns the branches moved.
int defer_gradient_branches(Graph& g);

}  // namespace crumb
