#include "engine/sgd.h"

#include "engine/error.h"
#include "kernels/cpu/kernels.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#include "kernels/cuda/kernels.h"
#endif

namespace crumb {

Sgd::Sgd(ParamStore& params, const OptimizerConfig& cfg) : Optimizer(params, cfg) {
  CRUMB_CHECK(cfg.kind == OptimizerKind::Sgd, "Sgd built from a ", optimizer_name(cfg.kind), " configuration");
}

void Sgd::update(double lr) {
  float* p = static_cast<float*>(params_.device_data_block());
  const float* g = static_cast<const float*>(params_.device_grad_block());
  float* m = state().empty() ? nullptr : device_state(0);
  // On the first step the buffer starts as the gradient (PyTorch clones it), whatever it holds.
  const bool first = steps() == 0;
  const auto flr = static_cast<float>(lr), momentum = static_cast<float>(cfg_.momentum),
             wd = static_cast<float>(cfg_.weight_decay);
  if (params_.device() == Device::CPU) {
    cpu::sgd_momentum_step(p, g, m, params_.count(), flr, momentum, wd, cfg_.nesterov, first);
  } else {
#if CRUMB_HAVE_CUDA
    cuda::sgd_momentum_step(p, g, m, params_.count(), flr, momentum, wd, cfg_.nesterov, first,
                            cuda::CudaBackend::of(backend(Device::CUDA)).compute());
#endif
  }
}

}  // namespace crumb
