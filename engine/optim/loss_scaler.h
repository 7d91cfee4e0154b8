// fp16's dynamic loss scale, one per optimizer step (GradScaler's policy, made right under
// micro-batching). Every micro-batch of a step scales its loss by the same S, so the accumulated
// gradient is S times the batch's gradient whatever the micro-batch size; after the last micro-batch
// the whole gradient is checked once for NaN and infinity; a step whose gradient overflowed is skipped
// entirely (parameters, optimizer state and the learning-rate schedule stay where they were) and S
// halves; after `growth_interval` clean steps in a row S doubles. The optimizer reads the gradient
// multiplied by 1/S (exact: S is a power of two). bf16 and float32 need no scale: S stays 1.
#pragma once
#include <cstdint>

namespace crumb {

struct LossScaleConfig {
  double init = 65536;        // 2^16, PyTorch's GradScaler default; a power of two
  int growth_interval = 2000;  // clean steps in a row before the scale doubles
  // Throws crumb::Error naming the bad field.
  void validate() const;
};

class LossScaler {
 public:
  // Disabled: the scale stays 1 and no step is ever skipped.
  LossScaler(const LossScaleConfig& cfg, bool enabled);
  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  // After a step's gradients are complete: whether the step may be taken, given how many gradient elements
  // are NaN or infinite. An overflow halves the scale; a scale that would fall below 1 is an error (the
  // gradients overflow even unscaled: the run diverged).
  bool update(uint64_t nonfinite_gradients);
  long long skipped() const { return skipped_; }
  int clean_steps() const { return clean_; }
  // A checkpoint's state (resume continues exactly).
  void restore(double scale, int clean_steps, long long skipped);

 private:
  LossScaleConfig cfg_;
  bool enabled_;
  double scale_ = 1;
  int clean_ = 0;
  long long skipped_ = 0;
};

}  // namespace crumb
