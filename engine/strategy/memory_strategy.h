// The memory strategy: for a batch of B samples and a memory budget, the micro-batch size m and, per saved
// value, whether it stays in the arena, is swapped to the host pool (engine/strategy/swap.h) or is recomputed in the
// backward pass (engine/strategy/recompute.h). Micro-batching first: it costs nothing per sample (each sample's
// arithmetic is the same at any m; in the cost model a larger m only spreads each kernel's fixed part over
// more samples), so `auto` takes the largest m whose in-memory plan fits, as the budget search always did. Only where the smallest
// allowed m (one BatchNorm group) or a forced --micro-batch does not fit does it swap and recompute:
// greedily, values live at the plan's peak first, each taking the cheaper of the two by predicted cost
// per byte saved (a recomputation costs its nodes' measured kernel times; a swap costs the part of its two
// copies, at the measured bandwidth, that the compute between its last forward and first backward use
// cannot hide), until the plan fits. Where a step's workspace sets the peak of a plan over the budget, the
// step runs its lean variant (less workspace, more time, the same bits; Node::lean) if it has one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "engine/strategy/cost_model.h"
#include "engine/strategy/memory_report.h"

namespace crumb {

enum class Strategy : uint8_t { Auto, MicroBatch, Swap, Recompute, None };
// "auto", "micro-batch", "swap", "recompute", "none"; anything else is an error listing them.
Strategy parse_strategy(const std::string& name);
const char* strategy_name(Strategy s);

struct StrategyRequest {
  Strategy strategy = Strategy::Auto;
  int batch = 1;
  std::size_t budget = 0;
  int micro_batch = 0;  // forced (--micro-batch), or 0 to choose
  OptimizerConfig optimizer;
  Device device = Device::CPU;
  int index = 0;
};

struct StrategyChoice {
  Strategy requested = Strategy::Auto;
  // What was done: "micro-batch" (in memory, micro-batches chosen by the budget), "in memory" (m given or
  // the whole batch), "recompute", "swap" or "swap+recompute".
  std::string used;
  std::vector<ValueId> swapped, recomputed;  // values of the graph (as built) that left the arena
  // Of recomputed, those computed a second time in the backward pass (nested and light segment groups,
  // engine/strategy/segments.h).
  std::vector<ValueId> twice;
  std::vector<std::string> lean;             // steps that run their variant with less workspace (Node::lean)
  std::size_t in_memory_total = 0;           // the same micro-batch without swapping or recomputing
  // One micro-batch's step, predicted by the cost model, and the same in memory; 0 when nothing was
  // swapped or recomputed (no cost model was needed).
  double predicted_seconds = 0, in_memory_seconds = 0;
  CostModel costs;  // what the prediction used (empty when none was made)
};

struct StrategyPlan {
  MicroBatchPlan plan;
  StrategyChoice choice;
};

// Chooses, rewrites g for the choice (swap and recompute nodes) and compiles both passes once. g must have
// its backward graph. Throws crumb::Error when the budget cannot be met: at the smallest (or forced)
// micro-batch, it names the memory each strategy would need at least.
StrategyPlan plan_strategy(Graph& g, const StrategyRequest& request);

// The least budget plan_strategy(g, request) meets at the smallest (or forced) micro-batch, the one its
// failure names, from sizes alone: nothing is measured or rewritten.
std::size_t least_budget(const Graph& g, const StrategyRequest& request);
// The plan whose total least_budget(g, r) is, for a strategy that swaps or recomputes (swap, recompute or
// auto): g rewritten for it and compiled. Decided from sizes and estimated costs, as the least is: the same
// every run (plan_strategy at that budget takes the fastest plan that fits by measured times, which may be
// another); its choice has no predicted times.
StrategyPlan least_plan(Graph& g, const StrategyRequest& r);

// One plan on the memory-time frontier: the memory it needs (the least budget it fits) and the step the
// cost model predicts for it, and what it does with the saved values (bytes at its micro-batch).
struct FrontierPoint {
  std::size_t total = 0;
  double predicted_seconds = 0;
  std::string used;  // as StrategyChoice::used
  int kept = 0, recomputed = 0, swapped = 0, lean = 0;  // lean: steps running their lean variant (Node::lean)
  int twice = 0;  // of the values recomputed, those computed a second time (StrategyChoice::twice)
  // Empty for the graph memory_frontier was given; "In-Place" or "unfused" for a point of the graph a fused
  // plan falls back on there (plan_frontier, engine/train/trainer.h).
  std::string graph;
  std::size_t kept_bytes = 0, recomputed_bytes = 0, swapped_bytes = 0;
};

struct Frontier {
  Strategy strategy = Strategy::Auto;
  int micro_batch = 0;
  std::vector<FrontierPoint> points;  // from the least memory to in memory; each faster than the one before
  CostModel costs;
};

// The frontier of g (with its backward) at r.micro_batch (which must be given): the plan plan_strategy
// chooses for r.strategy at budgets spread evenly from the least that fits to the in-memory total, each
// predicted with kernel times measured here (in memory, at the timing batch), and of those the points
// that no plan with less memory beats on time. `points` budgets are tried.
Frontier memory_frontier(const Graph& g, const StrategyRequest& r, int points = 9);
// The same with g's costs given (measured at frontier_timing_batch(g, r)): for frontiers of several forms
// of one model drawn together, their costs aligned (engine/strategy/cost_model.h, align_costs).
Frontier memory_frontier(const Graph& g, const StrategyRequest& r, CostModel costs, int points = 9);
int frontier_timing_batch(const Graph& g, const StrategyRequest& r);

// The point a budget takes: the fastest whose memory fits it (the last that does); -1 when none fits or
// the budget is 0.
int budget_point(const Frontier& f, std::size_t budget);

// --explain --frontier's table: a line per point, marking budget_point's (0: none marked).
void write_frontier(std::ostream& os, const Frontier& f, std::size_t budget);

// --explain's account of the choice: the strategy, predicted step time against in memory, and one line
// per value swapped or recomputed (layer, op, bytes). Nothing when micro-batching alone did it.
void write_strategy_report(std::ostream& os, const Graph& g, const StrategyPlan& p);

}  // namespace crumb
