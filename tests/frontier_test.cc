// The memory-time frontier: from the least memory a plan fits in to in memory, each point faster than the
// one before, what each keeps, recomputes and swaps, and a budget at a point's memory planned within it.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "engine/strategy/memory_strategy.h"
#include "tests/small_resnet.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

StrategyRequest request(Strategy s, std::size_t budget) {
  StrategyRequest r;
  r.strategy = s;
  r.batch = 16;
  r.micro_batch = 8;
  r.budget = budget;
  return r;
}

std::size_t least_budget(const Graph& g, Strategy s) {
  const std::string msg = test::error_of([&] {
    Graph copy = g;
    plan_strategy(copy, request(s, 64 << 10));
  });
  const std::size_t at = msg.find("(--memory-budget ");
  EXPECT_NE(at, std::string::npos) << msg;
  return at == std::string::npos ? std::size_t{0} : std::stoull(msg.substr(at + 17));
}

TEST(Frontier, FromTheLeastBudgetToInMemoryEachPointFaster) {
  const Graph g = test::small_resnet20();
  for (Strategy s : {Strategy::Auto, Strategy::Recompute}) {
    SCOPED_TRACE(strategy_name(s));
    const Frontier f = memory_frontier(g, request(s, 0), 5);
    ASSERT_GE(f.points.size(), 2u);
    EXPECT_EQ(f.micro_batch, 8);
    EXPECT_EQ(f.points.front().total, least_budget(g, s));
    const FrontierPoint& full = f.points.back();
    EXPECT_EQ(full.used, "in memory");
    EXPECT_EQ(full.recomputed + full.swapped, 0);
    Graph copy = g;
    EXPECT_EQ(full.total, plan_strategy(copy, request(Strategy::MicroBatch, std::size_t{1} << 40)).plan.memory.total());
    for (std::size_t i = 0; i < f.points.size(); ++i) {
      const FrontierPoint& p = f.points[i];
      EXPECT_EQ(p.kept + p.recomputed + p.swapped, full.kept);
      EXPECT_EQ(p.kept_bytes + p.recomputed_bytes + p.swapped_bytes, full.kept_bytes);
      if (s == Strategy::Recompute) {
        EXPECT_EQ(p.swapped, 0);
      }
      if (i == 0) continue;
      EXPECT_GT(p.total, f.points[i - 1].total);
      EXPECT_LT(p.predicted_seconds, f.points[i - 1].predicted_seconds);
    }
    // The plan a budget at the least point's memory gets fits it.
    Graph planned = g;
    const StrategyPlan p = plan_strategy(planned, request(s, f.points.front().total));
    EXPECT_LE(p.plan.memory.total(), f.points.front().total);
    std::ostringstream table;
    write_frontier(table, f, f.points.front().total);
    EXPECT_NE(table.str().find("memory-time frontier at micro-batch 8"), std::string::npos) << table.str();
    EXPECT_NE(table.str().find("<- the budget's"), std::string::npos) << table.str();
  }
}

}  // namespace
}  // namespace crumb
