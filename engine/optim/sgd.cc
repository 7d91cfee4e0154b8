#include "engine/optim/sgd.h"

#include "engine/device/backend.h"
#include "engine/base/error.h"

namespace crumb {

Sgd::Sgd(ParamStore& params, const OptimizerConfig& cfg) : Optimizer(params, cfg) {
  CRUMB_CHECK(cfg.kind == OptimizerKind::Sgd, "Sgd built from a ", optimizer_name(cfg.kind), " configuration");
}

void Sgd::update(double lr, const StepExtras& extras, const Span& span) {
  // On the first step the buffer starts as the gradient (PyTorch clones it), whatever it holds.
  const bool first = steps() == 0;
  if (params_.dtype() == DType::F64) {
    kernels_.sgd_f64(backend_, device_params<double>(span), static_cast<const double*>(span.grads),
                     state().empty() ? nullptr : device_state<double>(0, span), span.count, lr, cfg_.momentum,
                     cfg_.weight_decay, cfg_.nesterov, first, extras);
    return;
  }
  const auto flr = static_cast<float>(lr), momentum = static_cast<float>(cfg_.momentum),
             wd = static_cast<float>(cfg_.weight_decay);
  kernels_.sgd(backend_, device_params<float>(span), static_cast<const float*>(span.grads),
               state().empty() ? nullptr : device_state<float>(0, span), span.count, flr, momentum, wd, cfg_.nesterov,
               first, extras);
}

}  // namespace crumb
