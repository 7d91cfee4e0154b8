#include "engine/optim/loss_scaler.h"

#include <cmath>

#include "engine/base/error.h"

namespace crumb {

void LossScaleConfig::validate() const {
  int exponent = 0;
  CRUMB_CHECK(std::isfinite(init) && init >= 1 && init <= 0x1p64 && std::frexp(init, &exponent) == 0.5,
              "the loss scale must be a power of two in [1, 2^64], got ", init);
  CRUMB_CHECK(growth_interval >= 1, "the loss scale's growth interval must be >= 1 step, got ", growth_interval);
}

LossScaler::LossScaler(const LossScaleConfig& cfg, bool enabled) : cfg_(cfg), enabled_(enabled) {
  if (!enabled) return;
  cfg.validate();
  scale_ = cfg.init;
}

bool LossScaler::update(uint64_t nonfinite_gradients) {
  if (!enabled_) return true;
  if (nonfinite_gradients == 0) {
    if (++clean_ == cfg_.growth_interval) {
      clean_ = 0;
      if (scale_ < 0x1p64) scale_ *= 2;
    }
    return true;
  }
  ++skipped_;
  clean_ = 0;
  CRUMB_CHECK(scale_ > 1, "training diverged: the gradients hold ", nonfinite_gradients,
              " NaN or infinite values even at loss scale 1 (", skipped_,
              " steps skipped so far); the last checkpoint is kept (lower --lr, or use --precision bf16)");
  scale_ /= 2;
  return false;
}

void LossScaler::restore(double scale, int clean_steps, long long skipped) {
  CRUMB_CHECK(enabled_ || scale == 1, "a loss scale of ", scale, " for a run without one");
  if (enabled_) {
    LossScaleConfig c = cfg_;
    c.init = scale;
    c.validate();
  }
  CRUMB_CHECK(clean_steps >= 0 && skipped >= 0, "bad loss-scale state: ", clean_steps, " clean steps, ", skipped,
              " skipped");
  scale_ = scale;
  clean_ = clean_steps;
  skipped_ = skipped;
}

}  // namespace crumb
