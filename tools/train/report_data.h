// What `train --report` shows: the plan of the chosen micro-batch size (its arena blocks and per-step
// live bytes), the memory of other sizes (the batch sweep), the memory-time frontier (--frontier), and
// what a run measured.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "engine/plan/arena_blocks.h"
#include "engine/graph/graph.h"
#include "engine/strategy/memory_report.h"
#include "engine/strategy/memory_strategy.h"
#include "engine/plan/planner.h"

namespace crumb::train {

// A short measured run at one micro-batch size (--sweep): a few optimizer steps after a warm-up one.
struct Trial {
  int micro_batch = 0;
  int steps = 0;               // timed optimizer steps
  double step_seconds = 0;     // mean time of a timed step (a whole batch)
  double samples_per_s = 0;
  std::size_t rss_bytes = 0;   // peak growth of the resident memory during the trial (RssGrowth)
};

// What the training run measured, next to what the plan predicted.
struct Measured {
  long long steps = 0;  // optimizer steps
  double train_seconds = 0, samples_per_s = 0;
  std::size_t rss_bytes = 0;      // peak growth of the resident memory while training (RssGrowth)
  std::size_t max_rss_bytes = 0;  // the process's peak resident memory (program and dataset included)
  double test_accuracy = 0;
};

struct ReportData {
  std::string title;     // "lenet5 on cpu"
  std::string subtitle;  // "batch 64 in 1 micro-batch of 64 (largest that fits the budget)"
  const Graph* graph = nullptr;  // outlives the report
  int batch = 0;
  std::size_t budget = 0;
  MemoryBreakdown memory;  // of the chosen micro-batch size, as --explain prints it
  MemoryPlan plan;         // its training pass
  std::vector<ArenaBlock> blocks;
  std::vector<MemoryBreakdown> sweep;  // ascending micro-batch sizes, the chosen one among them
  std::vector<Trial> trials;           // ascending
  std::optional<Measured> measured;
  std::optional<Frontier> frontier;  // --frontier: the memory-time frontier at the chosen micro-batch

  int micro_batch() const { return memory.micro_batch; }
};

}  // namespace crumb::train
