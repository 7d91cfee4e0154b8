#include "engine/optim/adamw.h"

#include "engine/device/backend.h"
#include "engine/base/error.h"

namespace crumb {

AdamW::AdamW(ParamStore& params, const OptimizerConfig& cfg) : Optimizer(params, cfg) {
  CRUMB_CHECK(cfg.kind == OptimizerKind::AdamW, "AdamW built from a ", optimizer_name(cfg.kind), " configuration");
}

void AdamW::update(double lr, const StepExtras& extras) {
  float* p = static_cast<float*>(params_.device_data_block());
  const float* g = static_cast<const float*>(params_.device_grad_block());
  // PyTorch increments state["step"] before computing the bias corrections.
  const AdamWScalars s = adamw_scalars(lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, steps() + 1);
  kernels_.adamw(backend_, p, g, device_state(0), device_state(1), params_.count(), s, extras);
}

}  // namespace crumb
