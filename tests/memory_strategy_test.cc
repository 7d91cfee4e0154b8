// The memory strategy: micro-batching where it suffices; swapping and recomputation, chosen per value by
// the cost model, where the smallest allowed or a forced micro-batch does not fit; the same bits either
// way; and errors that name what each strategy would need.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/base/error.h"
#include "engine/base/rss.h"
#include "engine/strategy/memory_strategy.h"
#include "engine/train/scheduler.h"
#include "engine/train/model_registry.h"
#include "engine/train/network.h"
#include "tests/alloc_counter.h"
#include "tests/batch_outcome.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

constexpr int kChannels = 3, kSize = 8, kClasses = 5, kBatch = 16;

Graph resnet20(int group) {
  models::NormSpec norm;
  norm.bn.group = group;
  Graph g = models::build("resnet20", {kChannels, kSize, kSize, kClasses, norm});
  build_backward(g);
  return g;
}

StrategyRequest request(Strategy s, std::size_t budget, int micro_batch) {
  StrategyRequest r;
  r.strategy = s;
  r.batch = kBatch;
  r.budget = budget;
  r.micro_batch = micro_batch;
  return r;
}

// One batch's gradients and running statistics through the plan's compiled passes.
std::vector<float> train_batch(const Graph& g, StrategyPlan p) {
  test::BatchOutcome out = test::run_one_batch(g, std::move(p), kBatch, kClasses);
  out.grads.insert(out.grads.end(), out.state.begin(), out.state.end());
  return out.grads;
}

// The least budget strategy s fits resnet20's micro-batch of 8 in, as the error of a budget it does not
// fit reports it.
std::size_t least_budget(const Graph& g, Strategy s) {
  const std::string msg = test::error_of([&] {
    Graph copy = g;
    plan_strategy(copy, request(s, 64 << 10, 8));
  });
  const std::size_t at = msg.find("(--memory-budget ");
  EXPECT_NE(at, std::string::npos) << msg;
  return at == std::string::npos ? std::size_t{0} : std::stoull(msg.substr(at + 17));
}

MemoryBreakdown in_memory(int m) {
  const Graph g = resnet20(4);
  return measure_memory(g, m, OptimizerConfig{}, Device::CPU, 0, kBatch);
}
std::size_t in_memory_total(int m) { return in_memory(m).total(); }

TEST(MemoryStrategy, MicroBatchingFirst) {
  Graph g = resnet20(4);
  const std::size_t budget = in_memory_total(8);
  const StrategyPlan p = plan_strategy(g, request(Strategy::Auto, budget, 0));
  EXPECT_EQ(p.choice.used, "micro-batch");
  EXPECT_EQ(p.plan.micro_batch, choose_micro_batch(resnet20(4), kBatch, budget, OptimizerConfig{}).micro_batch);
  EXPECT_TRUE(p.choice.swapped.empty() && p.choice.recomputed.empty());
  EXPECT_EQ(p.choice.predicted_seconds, 0.0) << "nothing to predict: no cost model is measured";
}

TEST(MemoryStrategy, EachStrategyFitsAForcedMicroBatchWithTheSameBits) {
  const Graph plain = resnet20(4);
  Graph reference = plain;
  StrategyPlan reference_plan = plan_strategy(reference, request(Strategy::MicroBatch, std::size_t{1} << 40, 8));
  const std::vector<float> want = train_batch(plain, std::move(reference_plan));
  const std::size_t full = in_memory_total(8);
  // The least budget every strategy fits (what a budget they do not fit reports), below the in-memory total.
  std::size_t budget = 0;
  for (Strategy s : {Strategy::Auto, Strategy::Swap, Strategy::Recompute}) budget = std::max(budget, least_budget(plain, s));
  ASSERT_LT(budget, full);
  for (Strategy s : {Strategy::Auto, Strategy::Swap, Strategy::Recompute}) {
    SCOPED_TRACE(strategy_name(s));
    Graph g = plain;
    StrategyPlan p = plan_strategy(g, request(s, budget, 8));
    EXPECT_EQ(p.plan.micro_batch, 8);
    EXPECT_LE(p.plan.memory.total(), budget);
    EXPECT_EQ(p.choice.in_memory_total, full);
    if (s == Strategy::Swap) {
      EXPECT_TRUE(p.choice.recomputed.empty() && !p.choice.swapped.empty());
    }
    if (s == Strategy::Recompute) {
      EXPECT_TRUE(p.choice.swapped.empty() && !p.choice.recomputed.empty());
    }
    EXPECT_FALSE(p.choice.swapped.empty() && p.choice.recomputed.empty());
    EXPECT_GT(p.choice.predicted_seconds, 0.0);
    EXPECT_GT(p.choice.in_memory_seconds, 0.0);
    EXPECT_GT(p.choice.costs.seconds_per_byte, 0.0);
    EXPECT_EQ(p.plan.memory.host_pool > 0, !p.choice.swapped.empty());
    std::ostringstream report;
    write_strategy_report(report, g, p);
    EXPECT_NE(report.str().find("predicted step"), std::string::npos) << report.str();
    EXPECT_NE(report.str().find(p.choice.swapped.empty() ? "recompute " : "swap "), std::string::npos) << report.str();
    const std::vector<float> got = train_batch(g, std::move(p));
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  }
}

// One BatchNorm group of 8 is the smallest micro-batch; a budget it does not fit in memory is met by
// swapping or recomputing at m = 8, not by an error.
TEST(MemoryStrategy, TheSmallestGroupIsSwappedOrRecomputedWhenItDoesNotFit) {
  Graph g = resnet20(8);
  const std::size_t full = measure_memory(resnet20(8), 8, OptimizerConfig{}, Device::CPU, 0, kBatch).total();
  const StrategyPlan p = plan_strategy(g, request(Strategy::Auto, full - full / 8, 0));
  EXPECT_EQ(p.plan.micro_batch, 8);
  EXPECT_NE(p.choice.used, "micro-batch");
  EXPECT_LE(p.plan.memory.total(), full - full / 8);
}

TEST(MemoryStrategy, SwapOrRecomputeAloneTakeTheLargestMicroBatchTheyFit) {
  const std::size_t budget = in_memory_total(8);
  Graph g = resnet20(4);
  const StrategyPlan p = plan_strategy(g, request(Strategy::Swap, budget, 0));
  EXPECT_GE(p.plan.micro_batch, 12) << "swapping fits more than the 8 samples that fit in memory";
  EXPECT_LE(p.plan.memory.total(), budget);
}

TEST(MemoryStrategy, ABudgetNoStrategyMeetsNamesWhatEachNeeds) {
  Graph g = resnet20(4);
  const std::string msg = test::error_of([&] { plan_strategy(g, request(Strategy::Auto, 64 << 10, 8)); });
  for (const char* part : {"cannot hold --micro-batch 8 with any strategy", "in memory ", ", auto ", ", swap ",
                           ", recompute ", "raise --memory-budget"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
  const std::string swap_only = test::error_of([&] { plan_strategy(g, request(Strategy::Swap, 64 << 10, 8)); });
  EXPECT_NE(swap_only.find("with --strategy swap"), std::string::npos) << swap_only;
  const std::string none = test::error_of([&] { plan_strategy(g, request(Strategy::None, 64 << 10, 0)); });
  EXPECT_NE(none.find("use --strategy auto"), std::string::npos) << none;
}

TEST(MemoryStrategy, Names) {
  for (Strategy s : {Strategy::Auto, Strategy::MicroBatch, Strategy::Swap, Strategy::Recompute, Strategy::None})
    EXPECT_EQ(parse_strategy(strategy_name(s)), s);
  const std::string msg = test::error_of([] { parse_strategy("offload"); });
  EXPECT_NE(msg.find("unknown --strategy 'offload' (use auto, micro-batch, swap, recompute or none)"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace crumb

namespace crumb {
namespace {

// The least budget a failure reports is exact and the same every run: the search that decides whether a
// budget fits does not depend on measured kernel times. That budget fits; one byte less does not.
TEST(MemoryStrategy, TheLeastBudgetReportedIsTheLeastThatFits) {
  for (Strategy s : {Strategy::Auto, Strategy::Swap, Strategy::Recompute}) {
    SCOPED_TRACE(strategy_name(s));
    const Graph g = resnet20(4);
    const std::size_t least = least_budget(g, s);
    EXPECT_EQ(least_budget(g, s), least);
    Graph fits = g;
    const StrategyPlan p = plan_strategy(fits, request(s, least, 8));
    EXPECT_LE(p.plan.memory.total(), least);
    Graph short_by_one = g;
    EXPECT_FALSE(test::error_of([&] { plan_strategy(short_by_one, request(s, least - 1, 8)); }).empty());
  }
}

TEST(MemoryStrategy, StrategyNoneWithASmallerMicroBatchIsAnError) {
  Graph g = resnet20(4);
  const std::string msg = test::error_of([&] { plan_strategy(g, request(Strategy::None, 1 << 30, 8)); });
  EXPECT_NE(msg.find("--strategy none runs the batch of 16 as one micro-batch in memory, but --micro-batch is 8"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace crumb

namespace crumb {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Whether resident memory is what the program holds: not under sanitizers, whose shadow memory and
// quarantine of freed blocks add to it (alloc_counter_enabled is false exactly there).
bool rss_is_the_programs() { return alloc_counter_enabled(); }

Graph with_backward(Graph g) {
  build_backward(g);
  return g;
}

// Planning costs memory in proportion to the graph, not to its tensors: whether any plan fits is decided
// from sizes, so a budget none can meet fails with the budget error, naming the least that fits and the
// parameter that takes it, before any kernel is timed or any buffer allocated (it once measured kernels
// with buffers of the model's size: gigabytes for a 64 MiB budget).
TEST(MemoryStrategy, APlanThatCannotFitFailsFromSizesAlone) {
  struct Case {
    const char* what;
    Graph graph;
    const char* parameter;
  };
  const std::string huge_linear = R"({"nodes": [{"name": "flat", "op": "flatten"},
      {"name": "wide", "op": "linear", "out_features": 16777216}, {"name": "fc", "op": "linear", "out_features": 10}]})";
  Case cases[] = {
      {"lenet5 on 2048x2048 images", with_backward(models::build("lenet5", {1, 2048, 2048, 10})), "'7.weight' [120, 4161600]"},
      {"one huge linear layer", with_backward(build_network(huge_linear, {1, 28, 28, 10})), "'wide.weight' [16777216, 784]"},
      {"10^8 classes", with_backward(models::build("mlp", {1, 28, 28, 100000000})), "[100000000, 128]"},
  };
  for (Case& c : cases)
    for (Strategy s : {Strategy::Auto, Strategy::MicroBatch, Strategy::Swap, Strategy::Recompute}) {
      SCOPED_TRACE(std::string(c.what) + ", --strategy " + strategy_name(s));
      const RssGrowth rss;
      const std::string msg = test::error_of([&] {
        Graph g = c.graph;
        plan_strategy(g, request(s, 64 * kMiB, 0));
      });
      EXPECT_NE(msg.find("memory budget 64.00 MiB cannot hold"), std::string::npos) << msg;
      EXPECT_NE(msg.find("the persistent state alone"), std::string::npos) << msg;
      EXPECT_NE(msg.find(c.parameter), std::string::npos) << msg;
      // The graph's copies and plans, nothing of the model's size (parameters alone are gigabytes).
      if (rss_is_the_programs()) {
        EXPECT_LT(rss.peak_bytes(), 16 * kMiB);
      }
    }
}

// Sixteen GroupNorm + ReLU layers on 8 x 256 x 256 activations: cheap to run, and at a micro-batch of 4
// they need 148 MiB in memory against 100 MiB when recomputed.
Graph norm_stack() {
  std::string nodes = R"({"name": "c", "op": "conv2d", "out_channels": 8, "kernel_size": 1})";
  for (int i = 0; i < 16; ++i)
    nodes += ", {\"name\": \"g" + std::to_string(i) + "\", \"op\": \"group_norm\", \"num_groups\": 1}, {\"name\": \"r" +
             std::to_string(i) + "\", \"op\": \"relu\"}";
  nodes += R"(, {"name": "p", "op": "adaptive_avg_pool2d", "output_size": 1}, {"name": "f", "op": "flatten"},
             {"name": "fc", "op": "linear", "out_features": 10})";
  return with_backward(build_network("{\"nodes\": [" + nodes + "]}", {1, 256, 256, 10}));
}

// Where swapping or recomputing is needed, the kernel timings run a graph that fits the budget (the least
// memory rewrite, here recomputed), not the graph in memory: the process grows by the budget and the copy
// measurement's constant at most.
TEST(MemoryStrategy, MeasuringKernelTimesStaysWithinTheBudget) {
  const Graph plain = norm_stack();
  StrategyRequest r = request(Strategy::Recompute, 0, 4);
  r.batch = 4;
  const std::size_t in_memory = measure_memory(plain, 4, OptimizerConfig{}, Device::CPU, 0, 4).total();
  const std::string msg = test::error_of([&] {
    Graph g = plain;
    plan_strategy(g, r);
  });
  const std::size_t at = msg.find("(--memory-budget ");
  ASSERT_NE(at, std::string::npos) << msg;
  r.budget = std::stoull(msg.substr(at + 17));
  ASSERT_GT(in_memory, r.budget + 40 * kMiB) << "the graph in memory must not fit the bound below";
  for (Strategy s : {Strategy::Recompute, Strategy::Auto}) {
    SCOPED_TRACE(strategy_name(s));
    r.strategy = s;
    Graph g = plain;
    const RssGrowth rss;
    const StrategyPlan p = plan_strategy(g, r);
    EXPECT_LE(p.plan.memory.total(), r.budget);
    EXPECT_GT(p.choice.predicted_seconds, 0.0) << "kernel times were measured";
    // The graph in memory would take 48 MiB more (the measurement once took 150 MB here for a 105 MB budget).
    if (rss_is_the_programs()) {
      EXPECT_LT(rss.peak_bytes(), r.budget + 16 * kMiB) << "in memory: " << in_memory;
    }
  }
}

}  // namespace
}  // namespace crumb
