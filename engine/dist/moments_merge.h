// BatchNorm's deferred running statistics in data-parallel training. Each rank's last micro-batch leaves
// the moments of its share (count, mean and M2 per channel, Chan-merged over its groups) uncommitted;
// this merges them over the ranks with the same parallel formula, in two rounds of sums (counts and
// count-weighted means, then each rank's M2 about the global mean, which keeps it stable), and commits the
// result on every rank. The
// running statistics are then those of one process running the whole batch, up to rounding.
#pragma once
#include <vector>

#include "engine/dist/communicator.h"
#include "engine/run/executor.h"

namespace crumb {

class MomentsMerge {
 public:
  // e: the training executor, run with its commit deferred (Executor::set_deferred_commit).
  MomentsMerge(Executor& e, Communicator& comm);
  // After the batch's last run: merges every rank's moments (a rank without samples adds zeros) and
  // commits them.
  void merge_and_commit(bool has_samples);

 private:
  Executor& e_;
  Communicator& comm_;
  std::vector<Executor::BatchTotal> totals_;
  std::vector<double> moments_;                  // host copy of every total, [3][c] each
  std::vector<double> counts_, weighted_, m2_;  // per channel of every total: what is summed over the ranks
};

}  // namespace crumb
