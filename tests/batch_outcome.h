// What one training batch leaves behind, for tests that compare runs (micro-batch sizes, memory
// strategies): the loss, the gradient block, every float32 state value (running statistics) and every
// num_batches_tracked, from the same random batch every time.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "engine/data/source.h"
#include "engine/run/params.h"
#include "engine/train/scheduler.h"
#include "engine/train/trainer.h"
#include "tests/test_util.h"

namespace crumb::test {

struct BatchOutcome {
  double loss_sum = 0;
  std::vector<float> grads, state;
  std::vector<int64_t> tracked;
  std::size_t arena = 0, host_pool = 0;  // the training plan's
};

// What a batch left in `params` (g's) and its training plan.
inline BatchOutcome outcome_of(const Graph& g, ParamStore& params, double loss_sum, const MemoryPlan& plan) {
  BatchOutcome out;
  out.loss_sum = loss_sum;
  params.to_host();  // a device's gradients and state are read from their host copies
  const float* grads = static_cast<const float*>(params.grad_block());
  out.grads.assign(grads, grads + params.count());
  for (ValueId v : g.states()) {
    if (g.value(v).dtype == DType::I64) {
      out.tracked.push_back(*static_cast<const int64_t*>(params.state(v)));
    } else {
      const float* s = static_cast<const float*>(params.state(v));
      out.state.insert(out.state.end(), s, s + g.value(v).count(1));
    }
  }
  out.arena = plan.arena_bytes;
  out.host_pool = plan.host_pool_bytes;
  return out;
}

// One training batch (no test set) of the float32 images `pixels` ([samples, C, H, W] for `image` = C, H, W),
// taken as they are (normalisation 0, 1), with `labels` in [0, classes).
inline std::shared_ptr<const data::DataSplit> batch_of(std::vector<float> pixels, const Dims& image,
                                                       std::vector<int32_t> labels, int classes) {
  auto values = std::make_shared<const std::vector<float>>(std::move(pixels));
  data::DataSplit d;
  d.source = "a test batch";
  d.train.count = static_cast<int>(labels.size());
  d.train.channels = static_cast<int>(image.at(0));
  d.train.height = static_cast<int>(image.at(1));
  d.train.width = static_cast<int>(image.at(2));
  d.train.num_classes = classes;
  d.train.labels = std::move(labels);
  d.train.mapped.data = values->data();
  d.train.mapped.type = data::PixelType::F32;
  d.train.mapped.owner = values;
  d.test = d.train;
  d.test.keep_first(0);
  d.norm = data::Normalization(0.f, 1.f);
  return std::make_shared<const data::DataSplit>(std::move(d));
}

// `batch` random images shaped like g's input "x" (seed 6, in [-1, 1]) with labels in [0, classes) (seed 7).
inline std::shared_ptr<const data::DataSplit> random_batch(const Graph& g, int batch, int classes) {
  const Dims& x = g.value(g.find_value("x")).dims;
  return batch_of(random_floats(batch * dims_count(x), 6), x, random_labels(batch, classes, 7), classes);
}

// The run one_batch's Trainers make: `batch` samples in micro-batches of m (0: the plan's) on `device`,
// parameters initialised with seed 5.
inline TrainConfig one_batch_config(int m, int batch, Device device) {
  TrainConfig cfg;
  cfg.model = "test graph";
  cfg.batch = batch;
  cfg.micro_batch = m;
  cfg.seed = 5;
  cfg.device = device;
  return cfg;
}

// The first training batch of t, read before the optimizer steps; `inspect` (if given) sees the
// parameters then.
inline BatchOutcome first_batch(Trainer& t, const std::function<void(const ParamStore&)>& inspect = {}) {
  BatchOutcome out;
  BatchHooks hooks;
  hooks.before_step = [&](Trainer& tr, const BatchResult& r) {
    out = outcome_of(tr.graph(), tr.params(), r.loss_sum, tr.scheduler().train_executor().plan());
    if (inspect) inspect(tr.params());
  };
  t.set_batch_hooks(hooks);
  t.prepare();
  t.start_epoch(0);
  StepInfo step;
  CRUMB_CHECK(t.train_batch(step), "first_batch: the Trainer trained no batch");
  return out;
}

// One batch of random samples (random_batch) in micro-batches of m through a Trainer of g on `device`, from
// parameters initialised with seed 5 and then changed by `perturb` (if given), read before the optimizer
// steps; `inspect` (if given) sees the parameters then.
inline BatchOutcome run_one_batch(const Graph& g, int m, int batch, int classes,
                                  const std::function<void(const ParamStore&)>& inspect = {},
                                  Device device = Device::CPU, const std::function<void(ParamStore&)>& perturb = {}) {
  Trainer t(one_batch_config(m, batch, device), g, random_batch(g, batch, classes));
  if (perturb) t.set_initial_state(perturb);
  return first_batch(t, inspect);
}

// The same batch through a Trainer that runs `plan`, the caller's: g with the StrategyPlan its
// plan_strategy call chose, on the CPU.
inline BatchOutcome run_one_batch(Graph g, StrategyPlan plan, int batch, int classes) {
  RunPlan p;
  auto data = random_batch(g, batch, classes);
  p.graph = std::move(g);
  p.strategy = std::move(plan);
  p.device = Device::CPU;
  p.batch = batch;
  Trainer t(one_batch_config(0, batch, Device::CPU), std::move(p), std::move(data));
  return first_batch(t);
}

// The batch on the CPU from parameters initialised with seed 5, then (for s > 0) each scaled by 1 +- 1e-7
// with random signs (seed s). Float32 runs that add in different orders (another device, another
// algorithm) can land on either side of a ReLU whose input is within rounding of zero, and the
// gradients then differ by a step, not by rounding: resnet20 on 8x8 images jumps by 0.0082 normwise
// under some 1e-7 perturbations and by 2e-6 under others. Tests that compare a whole network's
// gradients across devices compare with the nearest of these near-tie outcomes.
inline BatchOutcome near_tie_outcome(const Graph& g, int m, int batch, int classes, unsigned s) {
  return run_one_batch(g, m, batch, classes, {}, Device::CPU, [s](ParamStore& params) {
    if (s == 0) return;
    std::mt19937 gen(s);
    float* w = static_cast<float*>(params.data_block());
    for (std::size_t i = 0; i < params.count(); ++i) w[i] *= gen() % 2 ? 1 + 1e-7f : 1 - 1e-7f;
  });
}

// The k parameters of g whose gradients differ most between two outcomes' grads, by their own normwise
// distance ("layer1.0.conv1.weight 0.31, ..."): what a failed comparison of whole gradient blocks prints.
inline std::string worst_parameters(const Graph& g, const std::vector<float>& got, const std::vector<float>& want,
                                    std::size_t k = 4) {
  ParamStore layout(g, Device::CPU);
  const float* base = static_cast<const float*>(layout.grad_block());
  std::vector<std::pair<double, std::string>> errors;
  for (ValueId p : g.params()) {
    const std::size_t at = static_cast<const float*>(layout.grad(p)) - base, count = g.value(p).count(1);
    if (at + count > got.size() || at + count > want.size()) continue;
    errors.emplace_back(norm_error(std::vector<float>(got.begin() + at, got.begin() + at + count),
                                   std::vector<float>(want.begin() + at, want.begin() + at + count)),
                        g.value(p).name);
  }
  std::sort(errors.rbegin(), errors.rend());
  std::string out;
  for (std::size_t i = 0; i < errors.size() && i < k; ++i)
    out += (i ? ", " : "") + errors[i].second + " " + std::to_string(errors[i].first);
  return out;
}

}  // namespace crumb::test
