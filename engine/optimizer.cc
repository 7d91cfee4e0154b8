#include "engine/optimizer.h"

#include "engine/error.h"
#include "kernels/cpu/kernels.h"

namespace crumb {

Sgd::Sgd(ParamStore& params, SgdConfig cfg) : params_(params), cfg_(cfg) {
  CRUMB_CHECK(params.dtype() == DType::F32, "SGD runs on float32 parameters");
  CRUMB_CHECK(cfg.lr > 0, "learning rate must be > 0, got ", cfg.lr);
  CRUMB_CHECK(cfg.momentum >= 0 && cfg.momentum < 1, "momentum must be in [0, 1), got ", cfg.momentum);
  CRUMB_CHECK(cfg.weight_decay >= 0, "weight decay must be >= 0, got ", cfg.weight_decay);
  if (cfg.momentum != 0) momentum_ = AlignedBuffer(params.bytes());
}

void Sgd::step() {
  cpu::sgd_momentum_step(static_cast<float*>(params_.data_block()), static_cast<const float*>(params_.grad_block()),
                         momentum_block(), params_.count(), cfg_.lr, cfg_.momentum, cfg_.weight_decay, steps_ == 0);
  ++steps_;
}

void Sgd::set_steps(long long steps) {
  CRUMB_CHECK(steps >= 0, "optimizer step count must be >= 0, got ", steps);
  steps_ = steps;
}

}  // namespace crumb
