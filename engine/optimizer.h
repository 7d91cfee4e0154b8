// SGD with momentum and weight decay, PyTorch semantics, applied once per batch in one pass over the
// whole parameter block. Momentum state is persistent memory of the same layout as the parameters.
#pragma once
#include "engine/arena.h"
#include "engine/params.h"

namespace crumb {

struct SgdConfig {
  float lr = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
};

class Sgd {
 public:
  Sgd(ParamStore& params, SgdConfig cfg);
  void step();
  std::size_t state_bytes() const { return momentum_.size(); }
  float* momentum_block() const { return reinterpret_cast<float*>(momentum_.data()); }
  long long steps() const { return steps_; }
  // Resuming from a checkpoint: the count decides whether the next step starts the momentum afresh.
  void set_steps(long long steps);

 private:
  ParamStore& params_;
  SgdConfig cfg_;
  AlignedBuffer momentum_;
  long long steps_ = 0;
};

}  // namespace crumb
