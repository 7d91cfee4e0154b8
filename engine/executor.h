// The executor turns a Graph + memory plan into a flat list of steps whose pointers are resolved
// once (arena offsets, parameter blocks, input bindings). Running it never allocates. One executor
// is compiled per (graph, micro-batch size, pass); a smaller final micro-batch reuses it. The graph
// must not change after an executor is compiled from it (steps point at its nodes).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/arena.h"
#include "engine/graph.h"
#include "engine/ops/op.h"
#include "engine/params.h"
#include "engine/planner.h"

namespace crumb {

enum class Pass : uint8_t {
  Train,  // forward + backward (the graph must have its backward built)
  Eval,   // forward only
};

class Executor {
 public:
  Executor(const Graph& g, ParamStore& params, Arena& arena, int max_batch, Pass pass);

  // Points an Input value at caller-owned data for the next run (n samples of it are read).
  void bind(ValueId input, const void* data);
  // Runs all steps on n samples (1 <= n <= max_batch). first_micro_batch selects whether parameter
  // gradients are written (true) or accumulated (false). loss_scale is 1/B for a batch of B samples.
  void run(int n, bool first_micro_batch, double loss_scale);

  // Results of the last run: the unscaled loss summed over its n samples and the correct count.
  double loss_sum() const { return loss_sum_; }
  int64_t correct() const { return correct_; }
  // Data of any value during/after the last run (views included).
  const void* data(ValueId v) const { return ptr_.at(v); }

  const MemoryPlan& plan() const { return plan_; }
  int max_batch() const { return max_batch_; }
  // Arena bytes this executor needs (activations and kernel workspace).
  std::size_t arena_bytes() const { return plan_.arena_bytes; }

 private:
  struct Step {
    const Node* node;
    StepFn fn;
    int64_t workspace_offset;  // in the arena, -1 if the step needs none
  };
  void resolve();

  const Graph& g_;
  ParamStore& params_;
  Arena& arena_;
  int max_batch_;
  MemoryPlan plan_;
  std::vector<Step> steps_;
  std::vector<void*> ptr_;
  std::vector<const void*> bound_;       // per value: bound input data
  std::vector<ValueId> input_views_;     // views whose storage is an Input (re-pointed per run)
  char* resolved_base_ = nullptr;  // the arena block the pointers were resolved against
  bool resolved_ = false;
  double loss_sum_ = 0.0;
  int64_t correct_ = 0;
};

// The steps of a pass in execution order (forward nodes, then backward nodes for Train).
std::vector<NodeId> pass_order(const Graph& g, Pass pass);

}  // namespace crumb
