#include "engine/plan/compile.h"

#include "engine/base/error.h"

namespace crumb {

std::vector<NodeId> pass_order(const Graph& g, Pass pass) {
  std::vector<NodeId> order;
  bool has_backward = false;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    has_backward = has_backward || g.node(i).backward;
    if (pass == Pass::Train || !(g.node(i).backward || g.node(i).train_only)) order.push_back(i);
  }
  CRUMB_CHECK(pass == Pass::Eval || has_backward, "a training pass needs the backward graph (call build_backward)");
  return order;
}

CompiledPass compile_pass(const Graph& g, Pass pass, int max_batch, Device device, int index) {
  CRUMB_CHECK(g.loss() >= 0, "compile: the graph has no loss");
  CRUMB_CHECK(max_batch >= 1, "compile: micro-batch size must be >= 1, got ", max_batch);
  CompiledPass c;
  c.pass = pass;
  c.device = device;
  c.index = index;
  Backend& b = backend(device, index);  // throws, ending in "use --device cpu", where the device is missing
  b.activate();
  c.max_batch = max_batch;
  const std::vector<NodeId> order = pass_order(g, pass);
  // Every node first: its workspace (cuDNN's depends on the algorithm chosen) goes into the plan.
  std::vector<std::size_t> workspace;
  for (NodeId id : order) {
    c.steps.push_back(compile_step(b, g, g.node(id), max_batch));
    workspace.push_back(c.steps.back().workspace);
  }
  c.plan = plan_pass(g, pass, max_batch, workspace);
  return c;
}

MemoryPlan plan_pass(const Graph& g, Pass pass, int max_batch, const std::vector<std::size_t>& workspace) {
  std::vector<ValueId> keep{g.loss()};
  for (ValueId x : g.inputs())
    if (g.value(x).grad >= 0) keep.push_back(g.value(x).grad);
  std::vector<ValueId> host;
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).host) host.push_back(v);
  return plan_memory(g, pass_order(g, pass), max_batch, keep, workspace, &host);
}

}  // namespace crumb
