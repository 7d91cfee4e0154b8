// Segment recomputation: the cuts of a forward pass, the grouping of dropped segments under a limit, and
// plans that recompute whole segments from checkpoints giving the same bits as in memory in less memory.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/graph/fusion.h"
#include "engine/graph/saved_values.h"
#include "engine/strategy/memory_strategy.h"
#include "engine/strategy/recompute.h"
#include "engine/strategy/segments.h"
#include "engine/train/model_registry.h"
#include "engine/train/scheduler.h"
#include "tests/batch_outcome.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

constexpr int kClasses = 5;

Graph resnet20(int size, int group, bool fused) {
  models::NormSpec norm;
  norm.bn.group = group;
  Graph g = models::build("resnet20", {3, size, size, kClasses, norm});
  build_backward(g);
  if (fused) fuse(g);
  return g;
}

TEST(Segments, EachCutIsCrossedByItsOutputAlone) {
  const Graph g = resnet20(8, 4, true);
  const std::vector<Segment> segs = segments(g);
  // The stem's layers and nine residual blocks at least.
  ASSERT_GE(segs.size(), 10u);
  const int forward = first_backward_node(g);
  EXPECT_EQ(segs.front().first_node, 0);
  EXPECT_EQ(segs.back().last_node, forward - 1);
  EXPECT_EQ(segs.back().output, -1);
  for (std::size_t k = 0; k + 1 < segs.size(); ++k) {
    EXPECT_EQ(segs[k + 1].first_node, segs[k].last_node + 1);
    const int cut = segs[k].last_node;
    for (ValueId v = 0; v < g.num_values(); ++v) {
      const Value& val = g.value(v);
      if (val.kind != ValueKind::Activation || val.producer < 0 || val.producer > cut) continue;
      bool read_after = false;
      for (NodeId i = cut + 1; i < forward; ++i)
        for (ValueId x : g.node(i).in) read_after |= x == v;
      EXPECT_EQ(read_after, v == segs[k].output) << "segment " << k << ": " << val.name;
    }
  }
}

TEST(Segments, GroupingStaysWithinTheLimit) {
  SegmentBytes four{{10, 10, 10, 10}, {1, 1, 1, 1}, {0, 0, 0, 0}};
  const std::vector<bool> all(4, true);
  // One group holds all 40 bytes; at 25 two groups of 20, the second with its 1-byte checkpoint; 9 holds
  // not even one segment.
  EXPECT_EQ(group_segments(all, four, 40), (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(group_segments(all, four, 25), (std::vector<bool>{true, false, true, false}));
  EXPECT_TRUE(group_segments(all, four, 9).empty());
  // Four groups of one hold 0, 1, 2 then 3 bytes of checkpoints before them: the last needs 13.
  EXPECT_EQ(group_segments(all, four, 13), all);
  EXPECT_TRUE(group_segments(all, four, 12).empty());
  four.transient = {0, 0, 0, 5};  // the last segment's backward holds 5 more bytes
  EXPECT_TRUE(group_segments(all, four, 17).empty());
  EXPECT_EQ(group_segments(all, four, 18), all);
  // A kept segment holds its saved bytes and the dropped output before it for every later group.
  const SegmentBytes three{{10, 10, 10}, {2, 2, 2}, {0, 0, 0}};
  const std::vector<bool> middle_kept{true, false, true};
  EXPECT_EQ(group_segments(middle_kept, three, 22), (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(group_segments(middle_kept, three, 21).empty());
}

// Every segment dropped, in groups of a few: whole chains (convolutions included) computed again from
// the checkpoints, the same bits as in memory, fused or not, at two micro-batch sizes.
TEST(Segments, RecomputedSegmentsGiveTheSameBits) {
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "unfused");
    const Graph plain = resnet20(8, 4, fused);
    const std::vector<Segment> segs = segments(plain);
    std::vector<bool> saved(plain.num_values(), false);
    for (const SavedValue& s : saved_values(plain)) saved[s.value] = true;
    SegmentBytes bytes{std::vector<std::size_t>(segs.size(), 0), std::vector<std::size_t>(segs.size(), 0),
                       std::vector<std::size_t>(segs.size(), 0)};
    std::size_t total = 0;
    for (std::size_t k = 0; k < segs.size(); ++k) {
      for (NodeId i = segs[k].first_node; i <= segs[k].last_node; ++i)
        for (ValueId v : plain.node(i).out)
          if (saved[v]) bytes.saved[k] += static_cast<std::size_t>(plain.value(v).count(1));
      if (segs[k].output >= 0) bytes.output[k] = static_cast<std::size_t>(plain.value(segs[k].output).count(1));
      total += bytes.saved[k];
    }
    const std::vector<bool> drop(segs.size(), true);
    const std::vector<bool> starts = group_segments(drop, bytes, total / 3);
    ASSERT_FALSE(starts.empty());
    int groups = 0;
    for (bool s : starts) groups += s;
    EXPECT_GT(groups, 1);
    EXPECT_LT(groups, static_cast<int>(segs.size()));
    Graph g = plain;
    EXPECT_GT(recompute(g, segment_plan(plain, segs, {drop, starts, {}, {}}).values), 0);
    for (int m : {8, 4}) {
      SCOPED_TRACE("micro-batch " + std::to_string(m));
      const test::BatchOutcome want = test::run_one_batch(plain, m, 8, kClasses),
                               got = test::run_one_batch(g, m, 8, kClasses);
      EXPECT_EQ(got.loss_sum, want.loss_sum);
      ASSERT_EQ(got.grads.size(), want.grads.size());
      EXPECT_EQ(0, std::memcmp(got.grads.data(), want.grads.data(), got.grads.size() * sizeof(float)));
      EXPECT_EQ(got.state, want.state);
      EXPECT_LT(got.arena, want.arena);
    }
  }
}

std::size_t least_recompute_budget(const Graph& g, StrategyRequest r) {
  r.budget = 64 << 10;
  const std::string msg = test::error_of([&] {
    Graph copy = g;
    plan_strategy(copy, r);
  });
  const std::size_t at = msg.find("(--memory-budget ");
  EXPECT_NE(at, std::string::npos) << msg;
  return at == std::string::npos ? std::size_t{0} : std::stoull(msg.substr(at + 17));
}

// ResNet-20 on 32x32 images in micro-batches of one BatchNorm group of 8: recomputing segments fits it in
// at most 0.6x the in-memory total (recomputing single values from kept neighbours needed 0.9x), and a
// batch trained at that budget has the in-memory batch's bits.
TEST(Segments, Resnet20RecomputesInAtMostSixTenthsOfItsMemory) {
  const Graph plain = resnet20(32, 8, true);
  StrategyRequest r;
  r.strategy = Strategy::Recompute;
  r.batch = 8;
  r.micro_batch = 8;
  const std::size_t least = least_recompute_budget(plain, r);
  Graph reference = plain;
  StrategyRequest in_memory = r;
  in_memory.strategy = Strategy::MicroBatch;
  in_memory.budget = std::size_t{1} << 40;
  StrategyPlan want_plan = plan_strategy(reference, in_memory);
  EXPECT_LE(double(least), 0.6 * double(want_plan.plan.memory.total()));

  r.budget = least;
  Graph g = plain;
  StrategyPlan p = plan_strategy(g, r);
  EXPECT_LE(p.plan.memory.total(), least);
  EXPECT_FALSE(p.choice.recomputed.empty());
  EXPECT_TRUE(p.choice.swapped.empty());
  auto run = [](const Graph& graph, StrategyPlan& plan) { return test::run_one_batch(graph, std::move(plan), 8, kClasses); };
  const test::BatchOutcome want = run(reference, want_plan), got = run(g, p);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  EXPECT_EQ(0, std::memcmp(got.grads.data(), want.grads.data(), got.grads.size() * sizeof(float)));
  EXPECT_EQ(got.state, want.state);
  EXPECT_EQ(got.loss_sum, want.loss_sum);
}

}  // namespace
}  // namespace crumb
