// The planner: every arena value (activations, gradients of activations, kept-for-backward tensors)
// gets a lifetime [first step, last step] in the execution order, then a byte offset in one arena.
// Views share their base's storage; an in-place op takes over its input's storage when the input
// is dead afterwards. A step's kernel workspace is a block live for that one step, planned like the
// rest. Offsets: greedy placement (each block at the lowest or tightest-fitting offset that does not
// overlap a placed block with an intersecting lifetime), over several block orders and seeded
// restarts, keeping the smallest arena; 256-byte aligned.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/base/align.h"
#include "engine/graph/graph.h"

namespace crumb {

// Where a planned value lives: the device arena (the default), or the host pool (pinned host memory on
// CUDA), where a later swap schedule keeps copies of saved activations between their last forward use and
// their first backward use. Each space is planned on its own; offsets index that space's block.
enum class MemorySpace : uint8_t { Arena, HostPool };

struct MemoryPlan {
  std::vector<NodeId> order;        // the steps, in execution order
  std::vector<int64_t> offset;      // per value: byte offset in its space's block, -1 if not planned
  std::vector<MemorySpace> space;   // per value: the space its offset indexes
  std::vector<int> first, last;     // per value: lifetime in steps (-1 if not in the arena)
  // Per value: the value owning the block it is stored in (itself, or the base of a view or the input an
  // in-place op overwrote; -1 if not planned). A block's lifetime spans all of its values'.
  std::vector<ValueId> block_of;
  std::vector<std::size_t> live_bytes;       // per step: bytes of arena values live at that step
  std::vector<std::size_t> step_workspace;   // per step: kernel scratch bytes
  std::vector<int64_t> workspace_offset;     // per step: offset of its scratch (-1 if none)
  std::size_t arena_bytes = 0;      // the whole arena: values and workspace
  std::size_t host_pool_bytes = 0;  // the host pool's block (0 when nothing is placed there)
  std::size_t lower_bound = 0;      // max over steps of live_bytes + step_workspace
  std::size_t peak_live = 0;        // max over steps of live_bytes (activations alone)
  std::size_t workspace_bytes = 0;  // max over steps of step_workspace
  double ratio() const { return lower_bound ? double(arena_bytes) / double(lower_bound) : 1.0; }
};

// Plans the nodes in `order` for micro-batches of `batch` samples. Values in `keep` stay live until
// the last step (outputs read after the run). `workspace` gives each step's scratch bytes, as the
// device's implementations asked for them (engine/plan/compile.h makes both). `host_pool` (null: none) lists
// values to place in the host pool instead of the arena; a view or in-place result shares the space of
// the value whose storage it takes, and workspace is always in the arena.
MemoryPlan plan_memory(const Graph& g, const std::vector<NodeId>& order, int batch, const std::vector<ValueId>& keep,
                       const std::vector<std::size_t>& workspace, const std::vector<ValueId>* host_pool = nullptr);

}  // namespace crumb
