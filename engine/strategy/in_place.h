// In-Place ABN's memory for fused normalisation chains. A BatchNorm (or GroupNorm) -> [add ->] ReLU chain
// kept both its input x and its output y for the backward pass: x for the normalisation's gradient, y for
// the ReLU's mask and the next convolution's weight gradient. In-Place ABN (Rota Bulo et al., 2018) keeps
// y alone and recovers what the backward needs by inverting the activation; ReLU cannot be inverted where
// it clamped, and the input gradient needs every normalised value, those too. So a fused plan does the
// exact dual: it keeps x and computes y again from x, just before the backward pass first reads it, with
// the fused op's own kernel (batch_norm_apply_relu, from the statistics the forward stored: the same bits).
// One tensor is kept where two were, at the cost of one more pass over it. A chain ending in a residual add
// computes its output from x and the residual, the previous block's output, recomputed in turn where it is
// one: a stage's block outputs are computed again together when its backward pass begins.
#pragma once
#include <vector>

#include "engine/graph/graph.h"

namespace crumb {

// Rewrites a fused graph (engine/graph/fusion.h; after fuse and before any memory strategy) so that the
// backward pass computes every saved output of an In-Place op again, with the values that go along with it
// (recompute_closure: a downsampling shortcut's BatchNorm), unless that would run a convolution or linear
// layer again. Returns the values recomputed.
std::vector<ValueId> recompute_in_place(Graph& g);

}  // namespace crumb
