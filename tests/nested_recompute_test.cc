// A second level of recomputation: values computed again a second time in the backward pass (Refresh),
// segment groups that compute their segments' inner values again from recomputed outputs (nested) or
// their BatchNorm and ReLU values again where they are read (light), the plans that choose them, and the
// backward pass reordered so that a shortcut's gradient waits less. The same bits as in memory throughout.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/graph/fusion.h"
#include "engine/graph/op.h"
#include "engine/graph/saved_values.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/strategy/defer_branches.h"
#include "engine/strategy/memory_strategy.h"
#include "engine/strategy/recompute.h"
#include "engine/strategy/segments.h"
#include "engine/strategy/swap.h"
#include "engine/train/model_registry.h"
#include "engine/train/trainer.h"
#include "models/norm_layer.h"
#include "tests/batch_outcome.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

constexpr int kClasses = 5;

Graph resnet20(int size, int group) {
  models::NormSpec norm;
  norm.bn.group = group;
  Graph g = models::build("resnet20", {3, size, size, kClasses, norm});
  build_backward(g);
  return g;
}

void expect_same_bits(const test::BatchOutcome& got, const test::BatchOutcome& want) {
  EXPECT_EQ(got.loss_sum, want.loss_sum);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  EXPECT_EQ(0, std::memcmp(got.grads.data(), want.grads.data(), got.grads.size() * sizeof(float))) << "gradients";
  EXPECT_EQ(got.state, want.state) << "running statistics";
}

// The nodes of g computing value v of `base` again (its producer's clones).
int clones_of(const Graph& base, const Graph& g, ValueId v) {
  const std::string name = base.node(base.value(v).producer).name + ".recompute";
  int n = 0;
  for (NodeId i = 0; i < g.num_nodes(); ++i) n += g.node(i).name == name;
  return n;
}

// Every recomputable saved value of resnet20 recomputed, and each ReLU's output made again before its
// last backward reader: those readers read a second copy, computed from the first copies of its inputs,
// the same bits.
TEST(Refresh, ASecondCopyIsComputedAgainFromItsInputs) {
  const Graph plain = resnet20(8, 4);
  std::vector<ValueId> values;
  std::vector<Refresh> refresh;
  for (const SavedValue& s : saved_values(plain)) {
    if (!recomputable(plain, s.value)) continue;
    values.push_back(s.value);
    if (s.first_backward < s.last_backward && plain.node(plain.value(s.value).producer).def->name == std::string("relu"))
      refresh.push_back({s.last_backward, {s.value}});
  }
  ASSERT_GE(refresh.size(), 4u);
  Graph once = plain, twice = plain;
  const int added_once = recompute(once, values), added_twice = recompute(twice, values, refresh);
  EXPECT_GT(added_twice, added_once);
  for (const Refresh& r : refresh) {
    const ValueId v = r.values[0];
    EXPECT_EQ(clones_of(plain, once, v), 1) << plain.value(v).name;
    EXPECT_EQ(clones_of(plain, twice, v), 2) << plain.value(v).name;
  }
  for (int m : {8, 4}) {
    SCOPED_TRACE("micro-batch " + std::to_string(m));
    expect_same_bits(test::run_one_batch(twice, m, 8, kClasses), test::run_one_batch(plain, m, 8, kClasses));
  }
}

// The comparison above sees a second copy that is not the value it stands for: the last reader of one
// ReLU's second copy made to read another ReLU's of the same shape instead changes the gradients.
TEST(Refresh, AWrongSecondCopyChangesTheGradients) {
  const Graph plain = resnet20(8, 4);
  std::vector<ValueId> values, relus;
  std::vector<Refresh> refresh;
  for (const SavedValue& s : saved_values(plain)) {
    if (!recomputable(plain, s.value)) continue;
    values.push_back(s.value);
    if (s.first_backward < s.last_backward && plain.node(plain.value(s.value).producer).def->name == std::string("relu")) {
      refresh.push_back({s.last_backward, {s.value}});
      relus.push_back(s.value);
    }
  }
  Graph g = plain;
  recompute(g, values, refresh);
  // Two ReLUs of the same shape; the last node reading the first one's second copy.
  ValueId a = -1, b = -1;
  for (std::size_t i = 0; i < relus.size() && a < 0; ++i)
    for (std::size_t j = i + 1; j < relus.size() && a < 0; ++j)
      if (plain.value(relus[i]).dims == plain.value(relus[j]).dims) a = relus[i], b = relus[j];
  ASSERT_GE(a, 0);
  auto last_copy = [&](ValueId v) {
    const std::string name = plain.value(v).name + ".recomputed";
    ValueId last = -1;
    for (ValueId u = 0; u < g.num_values(); ++u)
      if (g.value(u).name == name) last = u;
    return last;
  };
  const ValueId copy_a = last_copy(a), copy_b = last_copy(b);
  ASSERT_GE(copy_a, 0);
  ASSERT_GE(copy_b, 0);
  NodeId reader = -1;
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    for (ValueId v : g.node(i).in)
      if (v == copy_a && g.value(copy_b).producer < i) reader = i;
  ASSERT_GE(reader, 0);
  Graph wrong = g;
  for (ValueId& v : wrong.node(reader).in)
    if (v == copy_a) v = copy_b;
  const test::BatchOutcome want = test::run_one_batch(plain, 8, 8, kClasses),
                           got = test::run_one_batch(wrong, 8, 8, kClasses);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  EXPECT_NE(0, std::memcmp(got.grads.data(), want.grads.data(), got.grads.size() * sizeof(float)));
}

TEST(Refresh, RefusesWhatItCannotDo) {
  const Graph plain = resnet20(8, 4);
  const std::vector<SavedValue> saved = saved_values(plain);
  ValueId v = -1, other = -1;
  for (const SavedValue& s : saved)
    if (recomputable(plain, s.value)) (v < 0 ? v : other) = s.value;
  ASSERT_GE(other, 0);
  const NodeId backward = first_backward_node(plain);
  Graph g = plain;
  EXPECT_NE(test::error_of([&] { recompute(g, {v}, {{backward, {other}}}); }).find("which is not recomputed"),
            std::string::npos);
  g = plain;
  EXPECT_NE(test::error_of([&] { recompute(g, {v}, {{0, {v}}}); }).find("not a backward node"), std::string::npos);
}

// A model of three segments whose first two have large outputs: only a nested group of the first two holds
// the third's backward within 24 bytes (their outputs are held only while the group's own backward runs);
// from 26 a plain one, faster, with the third kept; nothing holds 23.
TEST(Segments, NestedGroupsWhereAPlainOneDoesNotFit) {
  SegmentModel m;
  m.output = {10, 10, 1};
  m.saved = m.saved_light = {12, 12, 12};
  m.peak = m.peak_light = {15, 15, 15};
  m.peak_recomputed = m.peak_recomputed_light = {14, 14, 14};
  m.seconds = {1, 1, 1};
  m.light_seconds = {0.5, 0.5, 0.5};
  m.can_drop = {true, true, true};
  const std::optional<SegmentChoice> nested = choose_segments(m, 24);
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->drop, (std::vector<bool>{true, true, true}));
  EXPECT_EQ(nested->starts, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(nested->nested, (std::vector<bool>{true, false, false}));
  EXPECT_EQ(nested->light, (std::vector<bool>{false, false, false}));
  const std::optional<SegmentChoice> plain = choose_segments(m, 26);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->drop, (std::vector<bool>{true, true, false}));  // the third kept: 10 + 15
  EXPECT_EQ(plain->starts, (std::vector<bool>{true, false, false}));
  EXPECT_EQ(plain->nested, (std::vector<bool>{false, false, false}));
  EXPECT_FALSE(choose_segments(m, 23));
  // Everything kept where everything fits: nothing recomputed.
  const std::optional<SegmentChoice> kept = choose_segments(m, 100);
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->drop, (std::vector<bool>{false, false, false}));
}

// Light groups hold less at the price of their cheap values' second computation: taken where only they fit.
TEST(Segments, LightGroupsWhereOnlyTheirPeakFits) {
  SegmentModel m;
  m.output = {4, 4};
  m.saved = {10, 10};
  m.saved_light = {6, 6};
  m.peak = {16, 16};
  m.peak_light = {12, 12};
  m.peak_recomputed = {14, 14};
  m.peak_recomputed_light = {9, 9};
  m.seconds = {2, 1};
  m.light_seconds = {0.25, 0.25};
  m.can_drop = {true, true};
  // Segment 0 kept holds 10 during segment 1's backward; recomputed from it, 10 + 14 = 24: plain (segment 0
  // recomputed instead would take longer).
  const std::optional<SegmentChoice> plain = choose_segments(m, 24);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->drop, (std::vector<bool>{false, true}));
  EXPECT_EQ(plain->light, (std::vector<bool>{false, false}));
  // At 13: both dropped, the second from the first's 4-byte output, light: 4 + 9.
  const std::optional<SegmentChoice> light = choose_segments(m, 13);
  ASSERT_TRUE(light);
  EXPECT_EQ(light->drop, (std::vector<bool>{true, true}));
  EXPECT_EQ(light->light[1], true);
  EXPECT_FALSE(choose_segments(m, 12));
}

// Nested and light groups, as segment_plan writes them for recompute, on resnet20 fused and unfused: each
// block's inner values computed a second time, the same bits as in memory in a smaller arena.
TEST(Segments, NestedAndLightGroupsGiveTheSameBits) {
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "unfused");
    Graph plain = resnet20(8, 4);
    if (fused) fuse(plain);
    const std::vector<Segment> segs = segments(plain);
    const std::size_t n = segs.size();
    ASSERT_GE(n, 8u);
    // The stem and the blocks in nested groups of three, the last ones light.
    SegmentChoice c{std::vector<bool>(n, true), std::vector<bool>(n, false), std::vector<bool>(n, false),
                    std::vector<bool>(n, false)};
    for (std::size_t k = 0; k + 1 < n; k += 3) {
      c.starts[k] = true;
      c.nested[k] = k < n / 2;
      c.light[k] = k >= n / 2;
    }
    c.drop[n - 1] = false;  // the loss
    const SegmentRecompute plan = segment_plan(plain, segs, c);
    ASSERT_FALSE(plan.refresh.empty());
    Graph g = plain;
    recompute(g, plan.values, plan.refresh);
    int twice = 0;
    for (ValueId v : plan.values) twice += clones_of(plain, g, v) > 1;
    EXPECT_GT(twice, 0);
    for (int m : {8, 4}) {
      SCOPED_TRACE("micro-batch " + std::to_string(m));
      const test::BatchOutcome want = test::run_one_batch(plain, m, 8, kClasses),
                               got = test::run_one_batch(g, m, 8, kClasses);
      expect_same_bits(got, want);
      EXPECT_LT(got.arena, want.arena);
    }
  }
}

// A network of ResNet-50's bottleneck blocks, narrow enough that its activations outweigh its parameters as
// ResNet-50's do at 224x224: a 3x3 stem of 16 channels, then three stages of two blocks of 4, 8 and 16 inner
// channels and 4x as many out, the first of each with a projection shortcut (the later ones' at stride 2).
Graph bottlenecks(int size, int group) {
  models::NormSpec norm;
  norm.bn.group = group;
  Graph g = models::build_graph(
      [&](Graph& g, ValueId x, ValueId y) {
        auto conv = [&](ValueId in, int out, int k, int stride, const std::string& name) {
          return nn::conv2d(g, in, out, k, name, nn::ConvOptions().with_stride(stride).with_pad(k / 2).with_bias(false));
        };
        auto norm_relu = [&](ValueId in, const std::string& p) {
          return nn::relu(g, models::norm_layer(g, in, p + ".bn", norm), p + ".relu");
        };
        ValueId h = norm_relu(conv(x, 16, 3, 1, "stem"), "stem");
        int in = 16;
        for (int stage = 0; stage < 3; ++stage)
          for (int b = 0; b < 2; ++b) {
            const int planes = 4 << stage, stride = stage > 0 && b == 0 ? 2 : 1;
            const std::string p = "layer" + std::to_string(stage + 1) + "." + std::to_string(b);
            ValueId r = norm_relu(conv(h, planes, 1, 1, p + ".conv1"), p + ".1");
            r = norm_relu(conv(r, planes, 3, stride, p + ".conv2"), p + ".2");
            r = models::norm_layer(g, conv(r, 4 * planes, 1, 1, p + ".conv3"), p + ".bn3", norm);
            const ValueId shortcut =
                in == 4 * planes && stride == 1
                    ? h
                    : models::norm_layer(g, conv(h, 4 * planes, 1, stride, p + ".downsample.0"), p + ".downsample.1", norm);
            h = nn::relu(g, nn::add(g, r, shortcut, p + ".add"), p + ".relu3");
            in = 4 * planes;
          }
        nn::softmax_cross_entropy(g, nn::linear(g, nn::global_avg_pool(g, h, "avgpool"), kClasses, "fc"), y, "loss");
      },
      {3, size, size, kClasses, norm}, DType::F32);
  build_backward(g);
  return g;
}

// One micro-batch of `batch` samples, with train's optimizer (SGD with momentum).
StrategyRequest request(Strategy strategy, int batch) {
  StrategyRequest r;
  r.strategy = strategy;
  r.batch = r.micro_batch = batch;
  r.optimizer = default_optimizer(OptimizerKind::Sgd);
  return r;
}

// On those blocks (at 32x32, micro-batches of 8) the plan of the least recomputation budget (0.53x of in
// memory; least_plan: decided from sizes alone, the same every run) computes values a second time, and a
// batch trained with it has the in-memory batch's bits.
TEST(Segments, BottleneckBlocksAtTheLeastRecomputeTwice) {
  const Graph plain = bottlenecks(32, 8);
  const StrategyRequest r = request(Strategy::Recompute, 8);
  StrategyRequest in_memory = request(Strategy::MicroBatch, 8);
  in_memory.budget = std::size_t{1} << 40;
  Graph reference = plain, g = plain;
  StrategyPlan want_plan = plan_strategy(reference, in_memory), p = least_plan(g, r);
  EXPECT_EQ(p.plan.memory.total(), least_budget(plain, r));
  EXPECT_LT(p.plan.memory.total(), want_plan.plan.memory.total());
  EXPECT_FALSE(p.choice.twice.empty());
  auto run = [](const Graph& graph, StrategyPlan& plan) { return test::run_one_batch(graph, std::move(plan), 8, kClasses); };
  expect_same_bits(run(g, p), run(reference, want_plan));
}

// Random segment plans (which segments drop, where groups start, nested or light), each with a random
// third of the remaining saved values swapped half of the time, on resnet20 fused and unfused and on the
// bottleneck blocks, from the graph with its shortcut gradients deferred: every plan the search could
// take, not only those it takes, has the in-memory batch's bits at both micro-batch sizes. Seeded: the
// same plans every run.
TEST(Segments, RandomPlansGiveTheSameBits) {
  struct Case {
    const char* name;
    Graph graph;
  };
  std::vector<Case> cases;
  cases.push_back({"resnet20 unfused", resnet20(8, 4)});
  cases.push_back({"resnet20 fused", resnet20(8, 4)});
  fuse(cases.back().graph);
  cases.push_back({"bottlenecks fused", bottlenecks(16, 4)});
  fuse(cases.back().graph);
  std::mt19937 gen(39);
  int plans = 0, twice = 0, swapped = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Graph deferred = c.graph;
    defer_gradient_branches(deferred);
    const std::vector<Segment> segs = segments(deferred);
    const std::size_t n = segs.size();
    for (int m : {8, 4}) {
      const test::BatchOutcome want = test::run_one_batch(c.graph, m, 8, kClasses);
      for (int t = 0; t < 6; ++t) {
        SCOPED_TRACE("micro-batch " + std::to_string(m) + ", plan " + std::to_string(t));
        SegmentChoice choice{std::vector<bool>(n), std::vector<bool>(n), std::vector<bool>(n), std::vector<bool>(n)};
        const bool all = gen() % 4 == 0;
        for (std::size_t k = 0; k < n; ++k) {
          choice.drop[k] = all || gen() % 4 != 0;
          choice.starts[k] = choice.drop[k] && (k == 0 || !choice.drop[k - 1] || gen() % 3 == 0);
          choice.nested[k] = gen() % 2;
          choice.light[k] = gen() % 2;
        }
        const SegmentRecompute plan = segment_plan(deferred, segs, choice);
        Graph g = deferred;
        recompute(g, plan.values, plan.refresh);
        twice += !plan.refresh.empty();
        if (gen() % 2) {
          std::vector<ValueId> out;
          for (const SavedValue& v : saved_values(g))
            if (gen() % 3 == 0) out.push_back(v.value);
          if (!out.empty()) swapped += static_cast<int>(swap(g, out, m, SwapTiming{}).swapped.size());
        }
        ++plans;
        expect_same_bits(test::run_one_batch(g, m, 8, kClasses), want);
      }
    }
  }
  // The draws reached every kind of plan.
  EXPECT_EQ(plans, 36);
  EXPECT_GT(twice, 0);
  EXPECT_GT(swapped, 0);
}

// Issue 39's target: ResNet-50 at 224x224, one micro-batch of 32, recomputing only (no host memory), fits
// in 0.30x of its in-memory total (unfused, the graph the fused plan falls back on where it needs least:
// engine/train/run_plan.cc). Planned only: nothing of that size is allocated.
TEST(Segments, Resnet50RecomputesInAtMostThreeTenthsOfItsMemory) {
  Graph g = models::build("resnet50", {3, 224, 224, 10});
  build_backward(g);
  const std::size_t in_memory = least_budget(g, request(Strategy::MicroBatch, 32)),
                    least = least_budget(g, request(Strategy::Recompute, 32));
  EXPECT_LE(double(least), 0.30 * double(in_memory)) << least << " of " << in_memory;
}

// resnet20's projection shortcuts: their branches run just before the sums of the gradients, the same bits.
TEST(DeferBranches, TheShortcutRunsBeforeItsSumWithTheSameBits) {
  const Graph plain = resnet20(8, 4);
  Graph g = plain;
  EXPECT_EQ(defer_gradient_branches(g), 2);  // layer2.0 and layer3.0
  for (const char* block : {"layer2.0", "layer3.0"}) {
    NodeId sum = -1, shortcut = -1;
    const std::string input = std::string(block) == "layer2.0" ? "layer1.2.relu2" : "layer2.2.relu2";
    for (NodeId i = 0; i < g.num_nodes(); ++i) {
      if (g.node(i).name == "grad_sum(" + input + ")") sum = i;
      if (g.node(i).name == std::string(block) + ".downsample.0.backward_data") shortcut = i;
    }
    ASSERT_GE(sum, 0) << block;
    ASSERT_GE(shortcut, 0) << block;
    // Only the shortcut's own nodes (its weight gradient) between its input gradient and the sum.
    EXPECT_LT(shortcut, sum);
    for (NodeId i = shortcut + 1; i < sum; ++i) EXPECT_NE(g.node(i).name.find(".downsample."), std::string::npos);
  }
  for (int m : {8, 4}) expect_same_bits(test::run_one_batch(g, m, 8, kClasses), test::run_one_batch(plain, m, 8, kClasses));
}

// ResNet-50's first block: its shortcut's input gradient (64 channels) is smaller than the block's output
// gradient (256) it reads, which would wait for it: left where it is; the next stages' are moved.
TEST(DeferBranches, OnlyWhereTheGradientWaitingIsTheLarger) {
  Graph g = models::build("resnet50", {3, 32, 32, kClasses});
  build_backward(g);
  auto before_sum = [&](const std::string& block) {
    NodeId shortcut = -1;
    for (NodeId i = 0; i < g.num_nodes(); ++i)
      if (g.node(i).name == block + ".downsample.0.backward_data") shortcut = i;
    return shortcut >= 0 && g.node(shortcut + 2).name.rfind("grad_sum(", 0) == 0;
  };
  EXPECT_EQ(defer_gradient_branches(g), 3);
  EXPECT_FALSE(before_sum("layer1.0"));
  for (const char* block : {"layer2.0", "layer3.0", "layer4.0"}) EXPECT_TRUE(before_sum(block)) << block;
}

// A chain of 2,000 residual blocks with identity shortcuts: nothing to move (each sum's first gradient is
// the chain's own, read on by the block's backward), decided in time linear in each sum's part of the pass.
// The search took a pass over the backward per node of it: a 1,000-block chain planned for minutes.
TEST(DeferBranches, ADeepResidualChainIsQuick) {
  Graph g;
  const ValueId x = g.input("x", {4, 4, 4});
  const ValueId y = g.input("y", {}, DType::I32);
  ValueId h = x;
  for (int b = 0; b < 2000; ++b) {
    const std::string name = "b" + std::to_string(b);
    const ValueId r = nn::relu(g, nn::conv2d(g, h, 4, 3, name + ".conv", nn::ConvOptions().with_pad(1)), name + ".relu");
    h = nn::add(g, r, h, name + ".add");
  }
  nn::softmax_cross_entropy(g, nn::linear(g, nn::flatten(g, h, "flat"), 3, "fc"), y, "loss");
  build_backward(g);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(defer_gradient_branches(g), 0);
  // About 4 s here, 28 s under AddressSanitizer on a slow day; the quadratic search took minutes.
#if defined(__SANITIZE_ADDRESS__)
  constexpr double kLimit = 120.0;
#else
  constexpr double kLimit = 20.0;
#endif
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), kLimit);
}

}  // namespace
}  // namespace crumb
