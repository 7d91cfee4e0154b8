#include "engine/optim/adamw.h"

#include "engine/device/backend.h"
#include "engine/base/error.h"

namespace crumb {

AdamW::AdamW(ParamStore& params, const OptimizerConfig& cfg) : Optimizer(params, cfg) {
  CRUMB_CHECK(cfg.kind == OptimizerKind::AdamW, "AdamW built from a ", optimizer_name(cfg.kind), " configuration");
}

void AdamW::update(double lr, const StepExtras& extras) {
  // PyTorch increments state["step"] before computing the bias corrections.
  const long long step = steps() + 1;
  if (params_.dtype() == DType::F64) {
    kernels_.adamw_f64(backend_, static_cast<double*>(params_.device_data_block()),
                       static_cast<const double*>(params_.device_grad_block()), device_state<double>(0),
                       device_state<double>(1), params_.count(),
                       adamw_scalars<double>(lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, step), extras);
    return;
  }
  float* p = static_cast<float*>(params_.device_data_block());
  const float* g = static_cast<const float*>(params_.device_grad_block());
  const AdamWScalars s = adamw_scalars(lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, step);
  kernels_.adamw(backend_, p, g, device_state<float>(0), device_state<float>(1), params_.count(), s, extras);
}

}  // namespace crumb
