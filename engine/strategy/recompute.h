// Recomputation (checkpointing): a rewrite of a training graph after autograd that clones the forward
// nodes computing some saved values into the backward pass, just before their first backward reader, so
// those values die with their last forward reader instead of living until the backward pass. Ops with a
// recompute rule (OpDef::recompute: all but the loss) can be recomputed; a value's inputs are used as they
// are, or recomputed too when they are in the set, so a chain between two kept values (BatchNorm -> ReLU,
// add -> ReLU, or convolution -> BatchNorm -> ReLU when the convolution's output is not kept either) is
// computed again as a whole, once, right before the backward pass first needs it.
// Kernels are deterministic on the CPU and a recomputed BatchNorm normalises with the statistics its
// forward stored, so gradients do not change by a bit.
#pragma once
#include <vector>

#include "engine/graph/graph.h"
#include "engine/graph/saved_values.h"

namespace crumb {

// Whether v's producer has a recompute rule that recomputes v.
bool recomputable(const Graph& g, ValueId v);

// The values to recompute along with saved value v so that recomputing v extends no other value's
// lifetime: v and, through its inputs, every recomputable forward value that the backward pass does not
// read (those die in the forward otherwise). Empty when v cannot be recomputed that way.
std::vector<ValueId> recompute_closure(const Graph& g, ValueId v, const std::vector<bool>& is_saved);

// A second level of recomputation: from backward node `before` on (a node of the graph recompute is given),
// the next reader of each of `values` gets a new copy, computed again from its inputs, instead of the copy
// made before; the earlier copy then dies with its last reader before `before`. Segment recomputation
// (engine/strategy/segments.h) uses it to compute a segment's inner values again from the recomputed
// segment input when its own backward begins, so that a group's recomputation holds only the segment
// outputs until then (Chen et al. 2016, multi-level).
struct Refresh {
  NodeId before = -1;
  std::vector<ValueId> values;  // of those recompute is given
};

// Rewrites g (forward + backward, as build_backward left it or after earlier rewrites) so that the backward
// pass reads recomputed copies of `values` (forward activations with recompute rules), made again where
// `refresh` says. Returns the nodes added. Throws crumb::Error naming a value that cannot be recomputed, or
// a refresh of a value not recomputed or before a node that is not a backward node.
int recompute(Graph& g, const std::vector<ValueId>& values, const std::vector<Refresh>& refresh = {});

}  // namespace crumb
