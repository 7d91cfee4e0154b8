// Swapping: a rewrite of a training graph after autograd that moves saved values out of the arena between
// their forward and backward use. For each value: a copy to the host pool starts right after the node
// computing it (swap_copy) and the arena copy stays live until that copy is done (swap_wait, after its
// last forward reader, later if the copy needs longer); in the backward pass a copy back into a fresh
// arena value starts ahead of its first reader, as early as a prefetch window bounded in bytes allows and
// the copy's predicted time asks, and that reader waits for it. The planner then gives the arena copy two
// short lifetimes instead of one long one. Copies change no bit (engine/device/copy_queue.h).
#pragma once
#include <cstddef>
#include <vector>

#include "engine/graph/graph.h"

namespace crumb {

struct SwapTiming {
  // Predicted seconds of each node of the graph (by node id), and of copying one byte; both empty/0: one
  // unit per node and copies as fast as one node, so each copy overlaps one node.
  std::vector<double> node_seconds;
  double seconds_per_byte = 0;
  // Bytes of arena copies coming back that may be in flight (prefetched, not yet read) at once.
  std::size_t window_bytes = 0;
};

struct SwapResult {
  std::vector<ValueId> swapped;  // the values swapped (those that come back too soon are not)
  std::vector<ValueId> host;     // their host-pool copies
  int nodes_added = 0;
};

// Rewrites g to swap `values` (saved values, engine/graph/saved_values.h) for micro-batches of `batch` samples.
// A value whose copy back would have to start before its copy out is done (it comes back too soon)
// is left in the arena. Throws crumb::Error naming a value that is not a saved value.
SwapResult swap(Graph& g, const std::vector<ValueId>& values, int batch, const SwapTiming& timing);

}  // namespace crumb
