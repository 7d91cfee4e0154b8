// The cost model's arithmetic (engine/strategy/cost_model.h): a node's time at m samples from its fixed and
// linear parts, lean steps priced once whichever way they were measured, and what measure_costs records.
// No test here depends on how fast anything ran.
#include <gtest/gtest.h>

#include <set>

#include "engine/device/backend.h"
#include "engine/strategy/cost_model.h"
#include "tests/small_resnet.h"

namespace crumb {
namespace {

NodeId lean_capable(const Graph& g) {
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    if (g.node(i).def->lean_variant) return i;
  ADD_FAILURE() << "resnet20 has no node with a lean variant";
  return 0;
}

TEST(CostModel, FixedPartCountedOnceAtAnyMicroBatch) {
  const Graph g = test::small_resnet20();
  const Node& n = g.node(0);
  CostModel c;
  c.measured_batch = 4;
  c.node_seconds[n.name] = 0.004;
  EXPECT_DOUBLE_EQ(c.seconds(n, 8), 0.008);  // no fixed part: linear
  c.fixed_seconds[n.name] = 0.001;
  EXPECT_DOUBLE_EQ(c.seconds(n, 4), 0.004);
  EXPECT_DOUBLE_EQ(c.seconds(n, 8), 0.001 + 0.003 * 2);
  EXPECT_DOUBLE_EQ(c.seconds(n, 32), 0.001 + 0.003 * 8);
  EXPECT_DOUBLE_EQ(c.seconds(n, 1), 0.001 + 0.003 / 4);
}

TEST(CostModel, LeanStepPricedOnceWhicheverWayItWasMeasured) {
  Graph g = test::small_resnet20();
  const NodeId id = lean_capable(g);
  const std::string name = g.node(id).name;
  CostModel c;
  c.measured_batch = 4;
  c.lean_slowdown = 2;
  c.node_seconds[name] = 0.004;
  c.fixed_seconds[name] = 0.001;
  const double plain = c.seconds(g.node(id), 8);
  g.node(id).lean = true;
  EXPECT_DOUBLE_EQ(c.seconds(g.node(id), 8), 2 * plain);
  // Measured running lean (within a budget only the lean plan fits): the time is the lean step's already.
  c.measured_lean.insert(name);
  EXPECT_DOUBLE_EQ(c.seconds(g.node(id), 8), plain);
  g.node(id).lean = false;
  EXPECT_DOUBLE_EQ(c.seconds(g.node(id), 8), plain / 2);
}

TEST(CostModel, SimulateSumsTheTrainingPassAtTheMicroBatch) {
  const Graph g = test::small_resnet20();
  CostModel c;
  c.measured_batch = 4;
  double expected = 0;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    c.node_seconds[g.node(i).name] = 1e-3 * (i + 1);
    c.fixed_seconds[g.node(i).name] = 1e-3;
    expected += 1e-3 + 1e-3 * i * 8 / 4;
  }
  EXPECT_NEAR(c.simulate(g, 8), expected, 1e-12 * expected);
}

// Kernels are timed where their operands outgrow the cache, as at the micro-batch they will run: resnet20 on
// 8x8 images (16 KiB a sample at its largest step) at the micro-batch itself, on 224x224 images (about
// 10 MiB a sample) at the device's own timing batch.
TEST(CostModel, TimedWhereTheOperandsOutgrowTheCache) {
  const std::size_t cache = backend(Device::CPU).cache_bytes();
  if (cache < (std::size_t{1} << 20) || cache > (std::size_t{64} << 20))
    GTEST_SKIP() << "a last-level cache of " << cache << " bytes: the sizes below assume 1-64 MiB";
  const int base = backend(Device::CPU).timing_batch();
  EXPECT_EQ(timing_batch(test::small_resnet20(), 64, Device::CPU), 64);
  EXPECT_EQ(timing_batch(test::small_resnet20(), 3, Device::CPU), 3);
  models::NormSpec norm;
  norm.bn.group = 8;
  Graph large = models::build("resnet20", {3, 224, 224, 5, norm});
  build_backward(large);
  EXPECT_EQ(timing_batch(large, 64, Device::CPU), base);
  EXPECT_EQ(timing_batch(large, 2, Device::CPU), 2);
}

TEST(CostModel, MeasuredPartsWithinTheirTimes) {
  Graph g = test::small_resnet20();
  g.node(lean_capable(g)).lean = true;
  const CostModel c = measure_costs(g, 8, Device::CPU);
  EXPECT_EQ(c.measured_batch, timing_batch(g, 8, Device::CPU));
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    SCOPED_TRACE(n.name);
    ASSERT_EQ(c.node_seconds.count(n.name), 1u);
    ASSERT_EQ(c.fixed_seconds.count(n.name), 1u);
    EXPECT_GE(c.fixed_seconds.at(n.name), 0.0);
    EXPECT_LE(c.fixed_seconds.at(n.name), c.node_seconds.at(n.name));
    EXPECT_EQ(c.measured_lean.count(n.name), n.lean ? 1u : 0u);
  }
}

// The unfused graph's costs made comparable with the fused graph's measured at another moment (here a
// machine 3 times slower, and one convolution slower still): its nodes that the fused graph has too take
// the fused graph's times, the rest scale by the shared nodes' ratio.
TEST(CostModel, AlignedCostsTakeTheReferenceTimesAndScaleTheRest) {
  models::NormSpec norm;
  norm.bn.group = 8;
  Graph unfused = models::build("resnet20", {3, 8, 8, 5, norm});
  build_backward(unfused);
  const Graph fused = test::small_resnet20();
  ASSERT_LT(fused.num_nodes(), unfused.num_nodes());
  CostModel measured = estimate_costs(fused, 4);
  for (auto& [name, seconds] : measured.node_seconds) seconds *= 3;
  std::string slow;
  for (NodeId i = 0; i < fused.num_nodes() && slow.empty(); ++i)
    if (fused.node(i).def->name == std::string("conv2d")) slow = fused.node(i).name;
  ASSERT_FALSE(slow.empty());
  measured.node_seconds[slow] *= 5;
  measured.fixed_seconds[slow] = 1e-3;
  const CostModel own = estimate_costs(unfused, 4);
  const CostModel aligned = align_costs(unfused, own, fused, measured);
  std::set<std::string> in_fused;
  for (NodeId i = 0; i < fused.num_nodes(); ++i) in_fused.insert(fused.node(i).name);
  double own_shared = 0, measured_shared = 0;
  for (NodeId i = 0; i < unfused.num_nodes(); ++i)
    if (in_fused.count(unfused.node(i).name)) {
      own_shared += own.node_seconds.at(unfused.node(i).name);
      measured_shared += measured.node_seconds.at(unfused.node(i).name);
    }
  const double load = measured_shared / own_shared;
  EXPECT_GT(load, 3.0);
  int shared = 0, alone = 0;
  for (NodeId i = 0; i < unfused.num_nodes(); ++i) {
    const std::string& name = unfused.node(i).name;
    SCOPED_TRACE(name);
    if (in_fused.count(name)) {
      ++shared;
      EXPECT_EQ(aligned.node_seconds.at(name), measured.node_seconds.at(name));
    } else {
      ++alone;
      EXPECT_NEAR(aligned.node_seconds.at(name), own.node_seconds.at(name) * load, 1e-12);
    }
  }
  EXPECT_GT(shared, 0);
  EXPECT_GT(alone, 0);
  EXPECT_EQ(aligned.fixed_seconds.at(slow), 1e-3);
  EXPECT_THROW(align_costs(unfused, estimate_costs(unfused, 8), fused, measured), Error);
}

}  // namespace
}  // namespace crumb
