// Optimizer configurations the tests build often (C++17 has no designated initialisers).
#pragma once
#include "engine/optim/optimizer.h"

namespace crumb {

inline OptimizerConfig sgd_config(double lr, double momentum, double weight_decay, bool nesterov = false) {
  OptimizerConfig c;
  c.lr = lr;
  c.momentum = momentum;
  c.weight_decay = weight_decay;
  c.nesterov = nesterov;
  return c;
}

inline OptimizerConfig adamw_config(double lr, double weight_decay, double beta1 = 0.9, double beta2 = 0.999,
                                    double eps = 1e-8) {
  OptimizerConfig c;
  c.kind = OptimizerKind::AdamW;
  c.lr = lr;
  c.weight_decay = weight_decay;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.eps = eps;
  return c;
}

}  // namespace crumb
