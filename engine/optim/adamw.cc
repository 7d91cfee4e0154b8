#include "engine/optim/adamw.h"

#include "engine/device/backend.h"
#include "engine/base/error.h"

namespace crumb {

AdamW::AdamW(ParamStore& params, const OptimizerConfig& cfg) : Optimizer(params, cfg) {
  CRUMB_CHECK(cfg.kind == OptimizerKind::AdamW, "AdamW built from a ", optimizer_name(cfg.kind), " configuration");
}

void AdamW::update(double lr, const StepExtras& extras, const Span& span) {
  // PyTorch increments state["step"] before computing the bias corrections.
  const long long step = steps() + 1;
  if (params_.dtype() == DType::F64) {
    kernels_.adamw_f64(backend_, device_params<double>(span), static_cast<const double*>(span.grads),
                       device_state<double>(0, span), device_state<double>(1, span), span.count,
                       adamw_scalars<double>(lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, step), extras);
    return;
  }
  const AdamWScalars s = adamw_scalars(lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, step);
  kernels_.adamw(backend_, device_params<float>(span), static_cast<const float*>(span.grads),
                 device_state<float>(0, span), device_state<float>(1, span), span.count, s, extras);
}

}  // namespace crumb
