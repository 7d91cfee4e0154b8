#include "engine/executor.h"

#include "engine/error.h"

namespace crumb {

std::vector<NodeId> pass_order(const Graph& g, Pass pass) {
  std::vector<NodeId> order;
  bool has_backward = false;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    has_backward = has_backward || g.node(i).backward;
    if (pass == Pass::Train || !g.node(i).backward) order.push_back(i);
  }
  CRUMB_CHECK(pass == Pass::Eval || has_backward, "a training pass needs the backward graph (call build_backward)");
  return order;
}

Executor::Executor(const Graph& g, ParamStore& params, Arena& arena, int max_batch, Pass pass)
    : g_(g), params_(params), arena_(arena), max_batch_(max_batch) {
  CRUMB_CHECK(&params.graph() == &g, "executor: the parameter store belongs to another graph");
  CRUMB_CHECK(g.loss() >= 0, "executor: the graph has no loss");
  std::vector<ValueId> keep{g.loss()};
  for (ValueId x : g.inputs())
    if (g.value(x).grad >= 0) keep.push_back(g.value(x).grad);
  plan_ = plan_memory(g, pass_order(g, pass), max_batch, keep);
  const bool f64 = g.float_dtype() == DType::F64;
  for (size_t s = 0; s < plan_.order.size(); ++s) {
    const Node& n = g.node(plan_.order[s]);
    const StepFn fn = f64 ? n.def->cpu_f64 : n.def->cpu_f32;
    CRUMB_CHECK(fn || n.def->view, "layer '", n.name, "' (", n.def->name, ") has no CPU implementation");
    if (fn) steps_.push_back({&n, fn, plan_.workspace_offset[s]});
  }
  ptr_.assign(g.num_values(), nullptr);
  bound_.assign(g.num_values(), nullptr);
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (v != g.storage_root(v) && g.value(g.storage_root(v)).kind == ValueKind::Input) input_views_.push_back(v);
  arena_.reserve(arena_bytes());
}

void Executor::bind(ValueId input, const void* data) {
  CRUMB_CHECK(input >= 0 && input < g_.num_values() && g_.value(input).kind == ValueKind::Input,
              "bind: value ", input, " is not a graph input");
  bound_[input] = data;
  ptr_[input] = const_cast<void*>(data);
}

void Executor::resolve() {
  for (ValueId v = 0; v < g_.num_values(); ++v) {
    const Value& val = g_.value(v);
    if (plan_.offset[v] >= 0)
      ptr_[v] = arena_.base() + plan_.offset[v];
    else if (val.kind == ValueKind::Param)
      ptr_[v] = params_.data(v);
    else if (val.kind == ValueKind::ParamGrad)
      ptr_[v] = params_.grad(params_.param_of_grad(v));
  }
  // Views of parameters share their storage too (views of arena values have offsets, views of
  // inputs are re-pointed on every run).
  for (ValueId v = 0; v < g_.num_values(); ++v)
    if (plan_.offset[v] < 0 && g_.value(v).view_of >= 0 && g_.value(g_.storage_root(v)).kind == ValueKind::Param)
      ptr_[v] = ptr_[g_.storage_root(v)];
  resolved_base_ = arena_.base();
  resolved_ = true;
}

void Executor::run(int n, bool first_micro_batch, double loss_scale) {
  CRUMB_CHECK(n >= 1 && n <= max_batch_, "executor compiled for up to ", max_batch_, " samples was given ", n);
  if (!resolved_ || resolved_base_ != arena_.base()) resolve();
  for (ValueId x : g_.inputs()) CRUMB_CHECK(bound_[x], "input '", g_.value(x).name, "' is not bound");
  for (ValueId v : input_views_) ptr_[v] = ptr_[g_.storage_root(v)];
  loss_sum_ = 0.0;
  correct_ = 0;
  StepArgs a;
  a.graph = &g_;
  a.ptr = ptr_.data();
  a.n = n;
  a.loss_scale = loss_scale;
  a.loss_sum = &loss_sum_;
  a.correct = &correct_;
  for (const Step& s : steps_) {
    a.node = s.node;
    a.workspace = s.workspace_offset >= 0 ? arena_.base() + s.workspace_offset : nullptr;
    a.accumulate = s.node->grad_write == GradWrite::Accumulate ||
                   (s.node->grad_write == GradWrite::FirstMicroBatch && !first_micro_batch);
    s.fn(a);
  }
}

}  // namespace crumb
