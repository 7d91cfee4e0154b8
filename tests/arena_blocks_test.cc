// The arena as the report draws it: one block per stored buffer or step workspace, read from the plan.
#include "engine/plan/arena_blocks.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "engine/graph/autograd.h"
#include "engine/plan/compile.h"
#include "engine/strategy/recompute.h"
#include "engine/strategy/swap.h"
#include "engine/train/model_registry.h"
#include "tests/ops/registry.h"

namespace crumb {
namespace {

// Blocks add up to the plan's live bytes and workspace at every step, sit inside the arena, never overlap
// while live, and carry roles that match when they live: gradients are made by the backward pass, saved
// tensors are forward values a backward step reads, activations die within the forward pass.
// Checks the blocks of g's training plan at 32 samples; adds the roles seen to `roles`.
void check_blocks(const Graph& g, const std::string& model, std::set<BlockRole>& roles) {
  {
    const int m = 32;
    const CompiledPass pass = compile_pass(g, Pass::Train, m, Device::CPU);
    const MemoryPlan& p = pass.plan;
    const std::vector<ArenaBlock> blocks = arena_blocks(g, p, m);
    const int steps = static_cast<int>(p.order.size());
    int first_backward = 0;
    while (!g.node(p.order[first_backward]).backward) ++first_backward;
    std::vector<std::size_t> live(steps, 0), workspace(steps, 0);
    for (const ArenaBlock& b : blocks) {
      EXPECT_LE(b.offset + b.bytes, p.arena_bytes) << model << " " << b.values;
      EXPECT_EQ(b.offset % kArenaAlign, 0u);
      ASSERT_LE(0, b.first);
      ASSERT_LE(b.first, b.last);
      ASSERT_LT(b.last, steps);
      for (int s = b.first; s <= b.last; ++s) (b.role == BlockRole::Workspace ? workspace : live)[s] += b.bytes;
      roles.insert(b.role);
      switch (b.role) {
        case BlockRole::Activation: EXPECT_LT(b.last, first_backward) << model << " " << b.values; break;
        case BlockRole::Saved: EXPECT_LT(b.first, first_backward) << model << " " << b.values;
          EXPECT_GE(b.last, first_backward) << model << " " << b.values; break;
        case BlockRole::Gradient: EXPECT_GE(b.first, first_backward) << model << " " << b.values; break;
        case BlockRole::Workspace: EXPECT_EQ(b.first, b.last); break;
        case BlockRole::SwappedIn:
        case BlockRole::Recomputed: EXPECT_GE(b.first, first_backward) << model << " " << b.values; break;
      }
      for (const ArenaBlock& o : blocks) {
        if (&o == &b || o.last < b.first || b.last < o.first) continue;
        EXPECT_TRUE(o.offset + o.bytes <= b.offset || b.offset + b.bytes <= o.offset)
            << model << ": " << b.values << " and " << o.values;
      }
    }
    EXPECT_EQ(live, p.live_bytes) << model;
    EXPECT_EQ(workspace, p.step_workspace) << model;
  }
}

TEST(ArenaBlocks, AgreeWithThePlan) {
  for (const char* model : {"lenet5", "cnn", "resnet20"}) {
    Graph g = models::build(model);
    build_backward(g);
    std::set<BlockRole> roles;
    check_blocks(g, model, roles);
  }
}

// Values swapped back in and recomputed are roles of their own; host-pool copies are not arena blocks.
TEST(ArenaBlocks, SwappedAndRecomputedValues) {
  Graph g = models::build("resnet20");
  build_backward(g);
  recompute(g, test::all_recomputable(g));
  swap(g, test::all_saved(g), 32, test::swap_window(1 << 20));
  std::set<BlockRole> roles;
  check_blocks(g, "resnet20, swapped and recomputed", roles);
  EXPECT_TRUE(roles.count(BlockRole::SwappedIn));
  EXPECT_TRUE(roles.count(BlockRole::Recomputed));
}

// A view or an in-place result is drawn inside the block of the value whose storage it shares, not as a
// block of its own: lenet5's ReLU after pooling runs in place and its flatten is a view.
TEST(ArenaBlocks, SharedStorageIsOneBlock) {
  Graph g = models::build("lenet5");
  build_backward(g);
  const CompiledPass pass = compile_pass(g, Pass::Train, 8, Device::CPU);
  int shared = 0;
  for (const ArenaBlock& b : arena_blocks(g, pass.plan, 8))
    if (b.values.find(", ") != std::string::npos) ++shared;
  EXPECT_GT(shared, 0);
  for (ValueId v = 0; v < g.num_values(); ++v) {
    if (pass.plan.block_of[v] < 0) continue;
    EXPECT_EQ(pass.plan.offset[v], pass.plan.offset[pass.plan.block_of[v]]);
  }
}

}  // namespace
}  // namespace crumb
