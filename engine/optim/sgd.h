// torch.optim.SGD (dampening 0): momentum, Nesterov, weight decay added to the gradient. State:
// "momentum" (PyTorch's momentum_buffer) when momentum != 0. Built through make_optimizer().
#pragma once
#include "engine/optim/optimizer.h"

namespace crumb {

class Sgd final : public Optimizer {
 public:
  Sgd(ParamStore& params, const OptimizerConfig& cfg);

 private:
  void update(double lr, const StepExtras& extras, const Span& span) override;
};

}  // namespace crumb
