// --sweep m1,m2,...: short measured training runs at several micro-batch sizes, for the report's
// throughput and resident-memory figures. Each trial is a Trainer of its own on the run's data (the
// run's parameters are not touched): a warm-up step, then a few timed optimizer steps on full batches.
#pragma once
#include <memory>
#include <vector>

#include "engine/train/trainer.h"
#include "tools/train/report_data.h"

namespace crumb::train {

// One trial per size of `sizes` (sorted, duplicates dropped), each checked first: no larger than the
// run's batch, allowed by its BatchNorm groups and within its budget. Each result is also printed to
// stderr as it finishes.
std::vector<Trial> run_trials(const TrainConfig& run, std::shared_ptr<const data::DataSplit> data,
                              const RunPlan& plan, std::vector<int> sizes);

}  // namespace crumb::train
