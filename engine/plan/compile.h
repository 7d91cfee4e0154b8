// A pass of a graph compiled for a device and a largest micro-batch: every node's implementation,
// per-node state and workspace (engine/device/backend.h), then the memory plan of its values and workspaces
// (engine/plan/planner.h). It is the one place a plan is made: the executor runs a CompiledPass, the budget
// search and `--explain` read theirs, and the scheduler builds its executors from the passes the search
// already compiled for the chosen size, so nothing is compiled or planned twice.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/device/backend.h"
#include "engine/graph/graph.h"
#include "engine/plan/planner.h"

namespace crumb {

enum class Pass : uint8_t {
  Train,  // forward + backward (the graph must have its backward built)
  Eval,   // forward only
};

// The steps of a pass in execution order (forward nodes, then backward nodes for Train).
std::vector<NodeId> pass_order(const Graph& g, Pass pass);

struct CompiledPass {
  Pass pass = Pass::Train;
  Device device = Device::CPU;
  int index = 0;  // which device of its kind
  int max_batch = 0;
  std::vector<CompiledStep> steps;  // one per node of plan.order (views have no fn)
  MemoryPlan plan;
};

// The memory plan of a pass of g at max_batch samples with these per-step workspace sizes (in the pass's
// order): what compile_pass plans, for callers that try many rewrites of a graph whose kernels they
// compiled once (engine/strategy/memory_strategy.h).
MemoryPlan plan_pass(const Graph& g, Pass pass, int max_batch, const std::vector<std::size_t>& workspace);

// Throws crumb::Error when the graph has no loss, a training pass has no backward graph, a node has no
// implementation on the device, or max_batch < 1. The plan keeps the loss and the gradients of inputs
// live to the end (they are read after a run). index: which device of its kind (per-node state such as a
// cuDNN plan is built there). Values marked Value::host are planned in the host pool instead of the arena
// (engine/plan/planner.h).
CompiledPass compile_pass(const Graph& g, Pass pass, int max_batch, Device device, int index = 0);

}  // namespace crumb
