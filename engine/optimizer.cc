#include "engine/optimizer.h"

#include "engine/error.h"
#include "kernels/cpu/kernels.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/context.h"
#include "kernels/cuda/kernels.h"
#endif

namespace crumb {

Sgd::Sgd(ParamStore& params, SgdConfig cfg) : params_(params), cfg_(cfg) {
  CRUMB_CHECK(params.dtype() == DType::F32, "SGD runs on float32 parameters");
  CRUMB_CHECK(cfg.lr > 0, "learning rate must be > 0, got ", cfg.lr);
  CRUMB_CHECK(cfg.momentum >= 0 && cfg.momentum < 1, "momentum must be in [0, 1), got ", cfg.momentum);
  CRUMB_CHECK(cfg.weight_decay >= 0, "weight decay must be >= 0, got ", cfg.weight_decay);
  if (cfg.momentum != 0) momentum_ = MirroredBuffer(params.bytes(), params.device());
}

void Sgd::step() {
  float* p = static_cast<float*>(params_.device_data_block());
  const float* g = static_cast<const float*>(params_.device_grad_block());
  float* m = reinterpret_cast<float*>(momentum_.device());
  if (params_.device() == Device::CPU) {
    cpu::sgd_momentum_step(p, g, m, params_.count(), cfg_.lr, cfg_.momentum, cfg_.weight_decay, steps_ == 0);
  } else {
#if CRUMB_HAVE_CUDA
    cuda::sgd_momentum_step(p, g, m, params_.count(), cfg_.lr, cfg_.momentum, cfg_.weight_decay, steps_ == 0,
                            cuda::Context::get().compute());
#endif
  }
  ++steps_;
}

void Sgd::set_steps(long long steps) {
  CRUMB_CHECK(steps >= 0, "optimizer step count must be >= 0, got ", steps);
  steps_ = steps;
}

}  // namespace crumb
