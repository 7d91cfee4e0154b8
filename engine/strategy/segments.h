// Segment recomputation (Chen et al. 2016, "Training deep nets with sublinear memory cost"): the forward
// pass is cut where a single activation carries everything from one part to the next (a residual block's
// output, a layer of a plain chain); between two such cuts lies a segment. A plan keeps some segments as
// they are and drops the others' saved values, and groups consecutive dropped segments: a group's input is
// kept as a checkpoint and the whole group is computed again from it when the backward pass first reads one
// of its values (engine/strategy/recompute.h clones the chain back to the checkpoint, once). The backward
// pass then holds the checkpoints, the kept segments and one group's values at a time instead of every
// saved value: the larger the groups, the fewer the checkpoints; the more segments dropped, the more time.
#pragma once
#include <cstddef>
#include <vector>

#include "engine/graph/graph.h"

namespace crumb {

struct Segment {
  int first_node = 0, last_node = 0;  // forward nodes [first_node, last_node]
  ValueId output = -1;  // the activation that alone crosses into the next segment (-1 for the last one)
};

// The segments of g's forward pass, in order (one, the whole forward, when nothing cuts it).
std::vector<Segment> segments(const Graph& g);

// What group_segments needs of each segment k, in bytes at the micro-batch planned.
struct SegmentBytes {
  std::vector<std::size_t> saved;      // the saved values it computes
  std::vector<std::size_t> output;     // its output (a checkpoint where a group begins after it)
  std::vector<std::size_t> transient;  // what its backward holds beside them: gradients and workspace
};

// Groups the dropped segments (drop[k]) so that the backward pass holds at most `limit` bytes where it can:
// while a group is computed again and its backward runs, what the forward kept before it (the kept
// segments' saved bytes and the groups' checkpoints) is live with the group's own saved bytes and the
// largest transient of its segments. An exact dynamic programme over where groups start, least bytes kept
// first (they weigh on every later group), for this model of the peak. Returns starts[k]: dropped segment k
// begins a group; empty when no grouping stays within the limit.
std::vector<bool> group_segments(const std::vector<bool>& drop, const SegmentBytes& bytes, std::size_t limit);

// The values to recompute (engine/strategy/recompute.h) for dropped segments in groups beginning at starts:
// every recomputable forward activation of a dropped segment but the checkpoints (the outputs that start a
// group or feed a kept segment).
std::vector<ValueId> segment_plan(const Graph& g, const std::vector<Segment>& segs, const std::vector<bool>& drop,
                                  const std::vector<bool>& starts);

}  // namespace crumb
