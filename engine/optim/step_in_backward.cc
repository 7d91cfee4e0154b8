#include "engine/optim/step_in_backward.h"

#include "engine/base/error.h"

namespace crumb {

StepInBackward::StepInBackward(Optimizer& opt, const Executor& train) : opt_(opt), train_(train) {
  const Graph& g = opt.params().graph();
  CRUMB_CHECK(g.step_in_backward(), "the optimizer steps in the backward pass only in a graph planned for it");
  const MemoryPlan& plan = train.plan();
  for (ValueId p : g.params()) {
    const ValueId dw = g.value(p).grad;
    CRUMB_CHECK(dw >= 0 && plan.last[dw] >= 0, "parameter '", g.value(p).name,
                "' gets no gradient in the training pass, so the optimizer cannot step in the backward pass");
    due_[&g.node(plan.order[plan.last[dw]])].push_back(p);
    ++params_;
  }
}

void StepInBackward::after_step(const Node& n) {
  const auto it = due_.find(&n);
  if (it == due_.end()) return;
  const Graph& g = opt_.params().graph();
  for (ValueId p : it->second) opt_.step_param(p, train_.data(g.value(p).grad));
  updated_ += it->second.size();
}

void StepInBackward::after_run() {
  // Every parameter's last step runs a kernel (the planner ends a gradient's life at a step that reads the
  // parameter or writes the gradient, never at a view); a miss here would leave a parameter a step behind.
  CRUMB_CHECK(updated_ == params_, "the optimizer updated ", updated_, " of ", params_,
              " parameters in the backward pass: a parameter's last step ran no kernel");
  opt_.end_step();
}

}  // namespace crumb
