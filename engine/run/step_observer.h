// What an Executor tells an observer while it runs a batch's last micro-batch (Executor::set_observer):
// each step as it is done, then the end of the run. Data-parallel training (engine/dist/grad_reducer.h)
// starts summing a gradient bucket over ranks as soon as the step that last writes it is done, while the
// rest of the backward runs.
#pragma once

#include "engine/graph/graph.h"

namespace crumb {

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // A run begins (one that failed part-way ended without after_run).
  virtual void before_run() {}
  // Node n's step is done (CPU) or enqueued (CUDA).
  virtual void after_step(const Node& n) = 0;
  // The last step is done or enqueued; work the device runs later must see what the observer did.
  virtual void after_run() = 0;
};

}  // namespace crumb
