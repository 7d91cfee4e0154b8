#include "engine/optim/lr_schedule.h"

#include <cmath>

#include "engine/base/error.h"

namespace crumb {

const char* lr_schedule_name(LrSchedule::Kind kind) {
  switch (kind) {
    case LrSchedule::Kind::Constant: return "constant";
    case LrSchedule::Kind::Step: return "step";
    case LrSchedule::Kind::Cosine: return "cosine";
  }
  return "?";
}

void LrSchedule::validate() const {
  CRUMB_CHECK(warmup_steps >= 0, "warmup steps must be >= 0, got ", warmup_steps);
  CRUMB_CHECK(step_size >= 1, "the step schedule's step size must be >= 1, got ", step_size);
  CRUMB_CHECK(gamma > 0, "the step schedule's gamma must be > 0, got ", gamma);
  CRUMB_CHECK(kind != Kind::Cosine || total_steps >= 1,
              "the cosine schedule needs the run's total number of optimizer steps (>= 1), got ", total_steps);
}

double LrSchedule::lr(double base_lr, long long k) const {
  CRUMB_CHECK(k >= 0, "learning-rate schedule: step ", k, " is negative");
  double factor = k < warmup_steps ? static_cast<double>(k + 1) / static_cast<double>(warmup_steps) : 1.0;
  switch (kind) {
    case Kind::Constant: break;
    case Kind::Step: factor *= std::pow(gamma, static_cast<double>(k / step_size)); break;
    case Kind::Cosine:
      factor *= (1 + std::cos(M_PI * static_cast<double>(k) / static_cast<double>(total_steps))) / 2;
      break;
  }
  return base_lr * factor;
}

}  // namespace crumb
