// The arena as pictures draw it: one block per stored buffer (a value with the views and in-place
// results sharing its storage) or per step's kernel workspace, with its offset, size, lifetime and role.
// Read from a MemoryPlan, so a picture shows exactly what the executor will point into.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/plan/planner.h"

namespace crumb {

// What a block holds, for colouring and legends.
enum class BlockRole : uint8_t {
  Activation,  // a forward value that dies within the forward pass
  Saved,       // a forward value kept alive until a backward step reads it
  Gradient,    // a gradient of an activation (produced by the backward pass)
  Workspace,   // one step's kernel scratch
  SwappedIn,   // a saved value copied back from the host pool for the backward pass (engine/strategy/swap.h)
  Recomputed,  // a saved value computed again in the backward pass (engine/strategy/recompute.h)
  // A parameter's gradient, in the arena until the parameter's update where the optimizer steps in the
  // backward pass (Graph::step_in_backward); not in kBlockRoles: legends name it where a plan has one.
  ParamGradient,
};
inline constexpr BlockRole kBlockRoles[] = {BlockRole::Activation, BlockRole::Saved,     BlockRole::Gradient,
                                            BlockRole::Workspace,  BlockRole::SwappedIn, BlockRole::Recomputed};
const char* role_name(BlockRole r);  // "activation", "saved for backward", ...

struct ArenaBlock {
  std::size_t offset = 0, bytes = 0;
  int first = 0, last = 0;  // lifetime in steps of the plan, inclusive
  BlockRole role = BlockRole::Activation;
  std::string layer;   // the layer whose step produced it (workspace: the layer of its step)
  std::string op;      // that step's op ("conv2d", "relu_backward")
  std::string values;  // the values stored in it, with shapes ("conv1 F32[64, 6, 28, 28], relu1 ...")
  DType dtype = DType::U8;  // the stored values' (their views and in-place results share it); workspace: bytes
};

// The arena blocks of a plan compiled for micro-batches of m samples (host-pool blocks are left out),
// ordered by first step then offset. Live bytes of values at step s are the sum of the non-workspace
// blocks whose lifetime contains s (MemoryPlan::live_bytes).
std::vector<ArenaBlock> arena_blocks(const Graph& g, const MemoryPlan& plan, int m);

}  // namespace crumb
