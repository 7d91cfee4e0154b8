#include "engine/plan/arena_blocks.h"

#include <algorithm>

#include "engine/graph/op.h"
#include "engine/ops/swap.h"

namespace crumb {

const char* role_name(BlockRole r) {
  switch (r) {
    case BlockRole::Activation: return "activation";
    case BlockRole::Saved: return "saved for backward";
    case BlockRole::Gradient: return "activation gradient";
    case BlockRole::Workspace: return "workspace";
    case BlockRole::SwappedIn: return "swapped back in";
    case BlockRole::Recomputed: return "recomputed";
    case BlockRole::ParamGradient: return "parameter gradient";
  }
  return "?";
}

namespace {
// The step that makes a block's value: its producer, or for a parameter's gradient in the arena (which has
// none: several steps may add into it) the first step that writes it.
const Node& first_writer(const Graph& g, const MemoryPlan& plan, ValueId v) {
  const NodeId producer = g.value(v).producer;
  return g.node(producer >= 0 ? producer : plan.order[plan.first[v]]);
}
}  // namespace

std::vector<ArenaBlock> arena_blocks(const Graph& g, const MemoryPlan& plan, int m) {
  // Index of each owning value's block; members add their lifetime, size and name to it.
  std::vector<int> index(g.num_values(), -1);
  std::vector<ArenaBlock> blocks;
  std::vector<ValueId> owner;
  for (ValueId v = 0; v < g.num_values(); ++v) {
    const ValueId root = plan.block_of[v];
    if (root < 0 || plan.space[v] != MemorySpace::Arena) continue;
    const Value& val = g.value(v);
    if (index[root] < 0) {
      index[root] = static_cast<int>(blocks.size());
      ArenaBlock b;
      b.offset = static_cast<std::size_t>(plan.offset[root]);
      b.first = plan.first[v];
      b.last = plan.last[v];
      const Node& producer = first_writer(g, plan, root);
      b.layer = producer.name;
      b.op = producer.def->name;
      b.dtype = g.value(root).dtype;
      blocks.push_back(b);
      owner.push_back(root);
    }
    ArenaBlock& b = blocks[index[root]];
    b.bytes = std::max(b.bytes, align_up(static_cast<std::size_t>(val.count(m)) * dtype_size(val.dtype)));
    b.first = std::min(b.first, plan.first[v]);
    b.last = std::max(b.last, plan.last[v]);
    Dims dims = val.dims;
    if (val.batched) dims.insert(dims.begin(), m);
    b.values += (b.values.empty() ? "" : ", ") + val.name + " " + dtype_name(val.dtype) + dims_str(dims);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    ArenaBlock& b = blocks[i];
    const Node& producer = first_writer(g, plan, owner[i]);
    if (g.value(owner[i]).kind == ValueKind::ParamGrad) b.role = BlockRole::ParamGradient;
    else if (producer.backward && producer.train_only)
      b.role = producer.def == &kSwapCopy ? BlockRole::SwappedIn : BlockRole::Recomputed;
    else if (producer.backward) b.role = BlockRole::Gradient;
    else if (g.node(plan.order[b.last]).backward) b.role = BlockRole::Saved;
  }
  for (std::size_t s = 0; s < plan.order.size(); ++s)
    if (plan.step_workspace[s]) {
      ArenaBlock b;
      b.offset = static_cast<std::size_t>(plan.workspace_offset[s]);
      b.bytes = plan.step_workspace[s];
      b.first = b.last = static_cast<int>(s);
      b.role = BlockRole::Workspace;
      b.layer = g.node(plan.order[s]).name;
      b.op = g.node(plan.order[s]).def->name;
      b.values = "scratch of " + b.layer;
      blocks.push_back(b);
    }
  std::stable_sort(blocks.begin(), blocks.end(), [](const ArenaBlock& a, const ArenaBlock& b) {
    return a.first != b.first ? a.first < b.first : a.offset < b.offset;
  });
  return blocks;
}

}  // namespace crumb
