#include "engine/adamw.h"

#include "engine/error.h"
#include "kernels/cpu/kernels.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#include "kernels/cuda/kernels.h"
#endif

namespace crumb {

AdamW::AdamW(ParamStore& params, const OptimizerConfig& cfg) : Optimizer(params, cfg) {
  CRUMB_CHECK(cfg.kind == OptimizerKind::AdamW, "AdamW built from a ", optimizer_name(cfg.kind), " configuration");
}

void AdamW::update(double lr) {
  float* p = static_cast<float*>(params_.device_data_block());
  const float* g = static_cast<const float*>(params_.device_grad_block());
  // PyTorch increments state["step"] before computing the bias corrections.
  const AdamWScalars s = adamw_scalars(lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, steps() + 1);
  if (params_.device() == Device::CPU) {
    cpu::adamw_step(p, g, device_state(0), device_state(1), params_.count(), s);
  } else {
#if CRUMB_HAVE_CUDA
    cuda::adamw_step(p, g, device_state(0), device_state(1), params_.count(), s, cuda::CudaBackend::of(backend(Device::CUDA)).compute());
#endif
  }
}

}  // namespace crumb
