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
#include <optional>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/strategy/recompute.h"

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

// A segment plan: which segments are dropped (their saved values recomputed), where the groups of
// consecutive dropped segments begin, and how each group is computed again. A plain group is computed again
// as a whole from its checkpoint when its backward pass begins, and holds the values of its segments until
// their backward has read them. A nested group (two levels, after Chen et al. 2016) holds only its segments'
// outputs from then on: each segment's inner values are computed a second time, from the recomputed output
// before it, when the segment's own backward begins; it holds less for one more forward of every segment
// but its last. A light group holds, of each segment's inner values, those that a convolution or linear
// layer computes: the others (BatchNorm, ReLU, add: no multiplications to speak of) are made again from
// them where the backward pass reads them, after the group's recomputation has used them (the In-Place
// exchange inside a recomputed segment).
struct SegmentChoice {
  std::vector<bool> drop, starts;
  std::vector<bool> nested, light;  // of the group beginning at k (empty: none)
};

// What choose_segments weighs, per segment k, in bytes at the micro-batch planned and in seconds.
struct SegmentModel {
  std::vector<std::size_t> output;         // its output: a checkpoint where a group begins after it
  std::vector<std::size_t> saved, saved_light;  // what it holds from its group's recomputation to its backward
  // What its backward holds at most beside what came before it, with all its saved values there when it
  // begins (kept, or computed again by its group's first segment) or computed again when first read
  // (recomputed: in the last segment of a group, and every segment of a nested one); light: with its cheap
  // values made again where they are read.
  std::vector<std::size_t> peak, peak_light, peak_recomputed, peak_recomputed_light;
  std::vector<double> seconds, light_seconds;   // its forward; what a light group adds for it
  std::vector<bool> can_drop;                   // it has values to recompute
};

// The plan with the least recomputation time within `limit` bytes for this model of the backward pass:
// while segment j's backward runs, the forward's kept segments' saved bytes and checkpoints before it are
// held, and, in a plain group from k, the segments k to j - 1's saved bytes, in a nested one their outputs,
// beside j's peak. Chooses which segments to drop (where can_drop), where groups begin and how they are
// computed again. A dynamic programme over the segments that keeps, per segment and whether the one before
// it is dropped, every plan that no other beats on both bytes held and seconds: exact for the model.
// nullopt when nothing fits the limit.
std::optional<SegmentChoice> choose_segments(const SegmentModel& model, std::size_t limit);

// What a segment plan recomputes (engine/strategy/recompute.h): every recomputable forward activation of a
// dropped segment but the checkpoints (the outputs that start a group or feed a kept segment), and the
// second computations of nested and light groups (Refresh).
struct SegmentRecompute {
  std::vector<ValueId> values;
  std::vector<Refresh> refresh;
};
SegmentRecompute segment_plan(const Graph& g, const std::vector<Segment>& segs, const SegmentChoice& choice);

// Whether v is one of the values a light group makes again where they are read: a recomputable activation
// whose op does no multiplications to speak of (no FLOP count: not a convolution or linear layer).
bool cheap_to_recompute(const Graph& g, ValueId v);

}  // namespace crumb
