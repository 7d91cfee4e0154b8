// SGD with momentum and weight decay, PyTorch semantics, applied once per batch in one pass over the
// whole parameter block (one kernel launch on CUDA, on the compute stream). Momentum state is
// persistent memory of the same layout as the parameters, on the parameters' device.
#pragma once
#include "engine/buffer.h"
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
  // The host copy of the momentum (null without momentum); on CUDA current after to_host().
  float* momentum_block() const { return reinterpret_cast<float*>(momentum_.host()); }
  void to_host() { momentum_.to_host(); }
  void to_device() { momentum_.to_device(); }
  long long steps() const { return steps_; }
  // Resuming from a checkpoint: the count decides whether the next step starts the momentum afresh.
  void set_steps(long long steps);

 private:
  ParamStore& params_;
  SgdConfig cfg_;
  MirroredBuffer momentum_;
  long long steps_ = 0;
};

}  // namespace crumb
