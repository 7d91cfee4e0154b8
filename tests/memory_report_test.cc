// The budget -> micro-batch choice and the memory report users read.
#include <gtest/gtest.h>

#include <sstream>

#include "engine/graph/autograd.h"
#include "engine/base/error.h"
#include "engine/run/executor.h"
#include "engine/strategy/memory_report.h"
#include "engine/optim/optimizer.h"
#include "engine/train/scheduler.h"
#include "engine/train/model_registry.h"
#include "tests/optimizer_configs.h"

namespace crumb {
namespace {

const OptimizerConfig kSgd = sgd_config(0.1, 0.9, 0);

Graph trained_graph(const std::string& name) {
  Graph g = models::build(name);
  build_backward(g);
  return g;
}

TEST(MemoryReport, TotalGrowsWithMicroBatch) {
  const Graph g = trained_graph("lenet5");
  size_t prev = 0;
  for (int m : {1, 2, 5, 16, 64, 256}) {
    const MemoryBreakdown mb = measure_memory(g, m, kSgd);
    EXPECT_GT(mb.total(), prev) << m;
    prev = mb.total();
    EXPECT_EQ(mb.params, mb.grads);
    EXPECT_EQ(mb.optimizer_state, mb.params);
    EXPECT_GE(mb.arena, mb.activations);
  }
  EXPECT_EQ(measure_memory(g, 8, sgd_config(0.1, 0, 0)).optimizer_state, 0u);
  const MemoryBreakdown adamw = measure_memory(g, 8, adamw_config(1e-3, 0.01));
  EXPECT_EQ(adamw.optimizer_state, 2 * adamw.params);
  EXPECT_EQ(adamw.optimizer, "adamw: exp_avg + exp_avg_sq");
}

// What the optimizers allocate is what the report counts: AdamW keeps two parameter-sized blocks.
TEST(MemoryReport, CountsEachOptimizersState) {
  const Graph g = trained_graph("mlp");
  ParamStore params(g);
  for (const OptimizerConfig& cfg : {kSgd, sgd_config(0.1, 0, 0), adamw_config(1e-3, 0.01)}) {
    const std::unique_ptr<Optimizer> opt = make_optimizer(params, cfg);
    EXPECT_EQ(measure_memory(g, 4, cfg).optimizer_state, opt->state_bytes()) << optimizer_name(cfg.kind);
  }
}

TEST(MemoryReport, BreakdownMatchesWhatTheEngineAllocates) {
  const Graph g = trained_graph("cnn");
  ParamStore params(g);
  const std::unique_ptr<Optimizer> opt = make_optimizer(params, kSgd);
  Arena arena;
  const int m = 24;
  Executor train(g, params, arena, m, Pass::Train), eval(g, params, arena, m, Pass::Eval);
  const MemoryBreakdown mb = measure_memory(g, m, kSgd);
  EXPECT_EQ(mb.params, params.bytes());
  EXPECT_EQ(mb.optimizer_state, opt->state_bytes());
  EXPECT_EQ(mb.arena, arena.size());
}

// The budget search, --explain and the executors share one compile: the scheduler built from the
// chosen passes runs exactly the plans the search measured, and sizes the arena once for both.
TEST(MemoryReport, SchedulerRunsThePlansTheSearchMeasured) {
  const Graph g = trained_graph("lenet5");
  MicroBatchPlan chosen = choose_micro_batch(g, 512, measure_memory(g, 37, kSgd, Device::CPU, 0, 512).total(), kSgd);
  ASSERT_EQ(chosen.micro_batch, 37);
  const MemoryBreakdown mb = chosen.memory;
  const std::size_t train_arena = chosen.train.plan.arena_bytes, eval_arena = chosen.eval.plan.arena_bytes;
  ParamStore params(g);
  Arena arena;
  Scheduler sched(g, params, arena, std::move(chosen.train), std::move(chosen.eval));
  EXPECT_EQ(sched.micro_batch(), 37);
  EXPECT_EQ(sched.train_executor().plan().arena_bytes, train_arena);
  EXPECT_EQ(sched.eval_executor().plan().arena_bytes, eval_arena);
  EXPECT_EQ(arena.size(), mb.arena);
  EXPECT_EQ(sched.train_executor().plan().peak_live, mb.activations);
}

// Executors resolve their pointers once; an arena that would move under them refuses to grow.
TEST(MemoryReport, ArenaDoesNotGrowUnderAnExecutor) {
  const Graph g = trained_graph("mlp");
  ParamStore params(g);
  Arena arena;
  {
    Executor e(g, params, arena, 8, Pass::Train);
    EXPECT_NO_THROW(arena.reserve(arena.size()));
    EXPECT_THROW(arena.reserve(arena.size() + 1), Error);
    EXPECT_THROW(Executor(g, params, arena, 64, Pass::Train), Error);  // needs a larger arena
  }
  EXPECT_NO_THROW(arena.reserve(arena.size() + 1));  // free again once the executor is gone
}

TEST(MemoryReport, ChoosesLargestMicroBatchThatFits) {
  const Graph g = trained_graph("lenet5");
  for (int want : {1, 3, 40, 256}) {
    const size_t budget = measure_memory(g, want, kSgd, Device::CPU, 0, 1024).total();
    EXPECT_EQ(choose_micro_batch(g, 1024, budget, kSgd).micro_batch, want) << "budget " << budget;
    if (want > 1) {
      EXPECT_EQ(choose_micro_batch(g, 1024, budget - 1, kSgd).micro_batch, want - 1) << budget;
    }
  }
}

// On the CPU the budget is host memory, and the loaders' buffers (two micro-batches of m for training,
// two for evaluation) are part of it; they do not grow with the batch, which streams through them.
TEST(MemoryReport, BudgetCountsTheLoadersMicroBatchSlots) {
  const Graph g = trained_graph("lenet5");
  const MemoryBreakdown mb = measure_memory(g, 32, kSgd, Device::CPU, 0, 1000);
  const std::size_t sample = 28 * 28 * sizeof(float) + sizeof(int32_t);
  EXPECT_EQ(mb.loader, 4 * sample * 32);
  EXPECT_EQ(mb.total(), measure_memory(g, 32, kSgd).total() + mb.loader);
  EXPECT_EQ(measure_memory(g, 32, kSgd, Device::CPU, 0, 16).loader, 2 * sample * (16 + 32));
  const std::size_t budget = mb.total();
  EXPECT_EQ(choose_micro_batch(g, 1000, budget, kSgd).micro_batch, 32);
  EXPECT_EQ(choose_micro_batch(g, 60000, budget, kSgd).micro_batch, 32);
  EXPECT_LT(choose_micro_batch(g, 1000, budget - 1, kSgd).micro_batch, 32);
}

TEST(MemoryReport, NeverChoosesMoreThanTheBatch) {
  const Graph g = trained_graph("mlp");
  EXPECT_EQ(choose_micro_batch(g, 50, size_t{1} << 40, kSgd).micro_batch, 50);
}

TEST(MemoryReport, TooSmallBudgetNamesTheMinimum) {
  const Graph g = trained_graph("lenet5");
  const size_t need = measure_memory(g, 1, kSgd, Device::CPU, 0, 64).total();
  try {
    choose_micro_batch(g, 64, need - 1, kSgd);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(format_bytes(need)), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--memory-budget"), std::string::npos) << e.what();
  }
}

TEST(MemoryReport, ParseAndFormatSizes) {
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  EXPECT_EQ(parse_bytes("64MiB"), 64u << 20);
  EXPECT_EQ(parse_bytes("1.5GiB"), 3u << 29);
  EXPECT_EQ(parse_bytes("500MB"), 500000000u);
  EXPECT_EQ(parse_bytes("2K"), 2048u);
  for (const char* bad : {"", "abc", "-5MiB", "12XB", "0", "nan"}) EXPECT_THROW(parse_bytes(bad), Error) << bad;
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3u << 20), "3.00 MiB");
}

TEST(MemoryReport, TimelineCsvHasOneRowPerStep) {
  const Graph g = trained_graph("lenet5");
  const MemoryPlan plan = compile_pass(g, Pass::Train, 16, Device::CPU).plan;
  std::ostringstream csv;
  write_timeline_csv(csv, g, plan);
  std::istringstream in(csv.str());
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "step,pass,layer,op,live_bytes,workspace_bytes");
  size_t rows = 0, peak = 0;
  while (std::getline(in, line)) {
    ++rows;
    std::vector<std::string> cols;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) cols.push_back(c);
    ASSERT_EQ(cols.size(), 6u) << line;
    peak = std::max(peak, size_t(std::stoull(cols[4])) + size_t(std::stoull(cols[5])));
  }
  EXPECT_EQ(rows, plan.order.size());
  EXPECT_EQ(peak, plan.lower_bound);
}

}  // namespace
}  // namespace crumb
