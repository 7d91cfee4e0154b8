// torch.optim.AdamW: bias-corrected moments, decoupled weight decay, op for op in float32 with the
// per-step scalars computed in double on the host (kernels/adamw_scalars.h). State: "exp_avg",
// "exp_avg_sq". Built through make_optimizer().
#pragma once
#include "engine/optim/optimizer.h"

namespace crumb {

class AdamW final : public Optimizer {
 public:
  AdamW(ParamStore& params, const OptimizerConfig& cfg);

 private:
  void update(double lr, const StepExtras& extras, const Span& span) override;
};

}  // namespace crumb
