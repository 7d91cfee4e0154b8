// A reference model ready to train on the synthetic 16x16, 4-class set, on one device: graph (with its
// backward), parameters, arena, scheduler and SGD (lr 0.05, momentum 0.9, weight decay 1e-4). Shared by
// the CPU training tests and their CUDA twins.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/data/dataset.h"
#include "engine/optim/optimizer.h"
#include "tests/optimizer_configs.h"
#include "engine/train/scheduler.h"
#include "engine/train/model_registry.h"

namespace crumb {

struct TrainedModel {
  Graph g;
  ParamStore params;
  Arena arena;
  Scheduler sched;
  std::unique_ptr<Optimizer> opt;
  TrainedModel(const std::string& name, int micro_batch, uint64_t seed, Device device = Device::CPU, bool tf32 = false)
      : g(build_graph(name, tf32)), params(g, device), arena(device), sched(g, params, arena, micro_batch),
        opt(make_optimizer(params, sgd_config(0.05f, 0.9f, 1e-4f))) {
    params.init(seed);
  }
  static Graph build_graph(const std::string& name, bool tf32 = false) {
    Graph g = models::build(name, {1, 16, 16, 4});
    g.set_tf32(tf32);
    build_backward(g);
    return g;
  }
  // Whole blocks (padding included), copied back from the device first.
  std::vector<float> weights() {
    params.to_host();
    const float* p = static_cast<const float*>(params.data_block());
    return {p, p + params.count()};
  }
  std::vector<float> grads() {
    params.to_host();
    const float* p = static_cast<const float*>(params.grad_block());
    return {p, p + params.count()};
  }
};

// 256 synthetic samples shaped like the models' input above.
inline const data::Dataset& synthetic_dataset() {
  static const data::Dataset ds = data::make_synthetic(256, 1, 16, 16, 4, 11);
  return ds;
}

}  // namespace crumb
