// --sweep m1,m2,...: short measured training runs at several micro-batch sizes, for the report's
// throughput and resident-memory figures. Each trial trains fresh parameters (the run's own are not
// touched) for a warm-up step and then a few timed optimizer steps on full batches.
#pragma once
#include <vector>

#include "engine/data/loader.h"
#include "engine/graph/graph.h"
#include "engine/optim/optimizer.h"
#include "tools/train/report_data.h"

namespace crumb::train {

struct TrialSetup {
  const data::Dataset* train;
  data::Normalization norm;
  int batch;
  OptimizerConfig optimizer;
  Device device;
  uint64_t seed;
};

// One trial per size, in the order given; each result is also printed to stderr as it finishes.
std::vector<Trial> run_trials(const Graph& g, const std::vector<int>& sizes, const TrialSetup& setup);

}  // namespace crumb::train
