// Learning-rate schedules, evaluated per optimizer step (never per micro-batch): the lr of step k
// (0-based, counted over the whole run including steps restored from a checkpoint) is
//   lr(k) = base_lr * warmup(k) * decay(k)
// which is PyTorch's ChainedScheduler of the matching schedulers stepped once after every
// optimizer.step() (tools/bench/adamw_reference.py checks the values against them):
//   warmup(k) = (k + 1) / warmup_steps for k < warmup_steps, else 1
//               (LinearLR(start_factor=1/W, end_factor=1, total_iters=W-1): the first step already
//               moves, the last warmup step runs at the full rate);
//   constant:   decay(k) = 1;
//   step:       decay(k) = gamma^floor(k / step_size)              (StepLR, counted in optimizer steps);
//   cosine:     decay(k) = (1 + cos(pi * k / total_steps)) / 2     (CosineAnnealingLR, eta_min 0,
//               T_max = total_steps: the lr reaches 0 after the run's last step).
#pragma once

namespace crumb {

struct LrSchedule {
  enum class Kind { Constant, Step, Cosine };
  Kind kind = Kind::Constant;
  long long warmup_steps = 0;  // 0 or 1: no warmup
  long long step_size = 1000;  // step: decay every step_size optimizer steps
  double gamma = 0.1;          // step: factor per decay
  long long total_steps = 0;   // cosine: the horizon (T_max); must be >= 1

  // The lr that optimizer step k (0-based) uses. Throws crumb::Error on an invalid schedule.
  double lr(double base_lr, long long k) const;
  // Throws crumb::Error naming the field when the schedule cannot be evaluated.
  void validate() const;
};

const char* lr_schedule_name(LrSchedule::Kind kind);

}  // namespace crumb
