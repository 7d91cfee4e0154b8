// A small Trainer run on synthetic data, shared by the in-process Trainer tests: shuffled and augmented
// batches, a short last batch (90 samples in batches of 16), a step schedule and momentum, which is
// everything a resume must restore.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/error.h"
#include "engine/train/trainer.h"

namespace crumb::test {

inline std::shared_ptr<const data::DataSplit> synthetic_data(const TrainConfig& c) {
  return std::make_shared<const data::DataSplit>(data::load_data(c.data));
}

inline TrainConfig small_run() {
  TrainConfig c;
  c.model = "cnn";
  c.data.dataset = "synthetic";
  c.data.channels = 1;
  c.data.height = c.data.width = 12;
  c.data.classes = 4;
  c.data.limit_train = 90;
  c.data.limit_test = 20;
  c.augment = true;
  c.batch = 16;
  c.epochs = 2;
  c.optimizer.lr = 0.05;
  c.optimizer.momentum = 0.9;
  c.optimizer.schedule.kind = LrSchedule::Kind::Step;
  c.optimizer.schedule.step_size = 5;
  c.threads = 1;
  c.device = Device::CPU;
  return c;
}

// The weights after small_run() of a network description in micro-batches of `micro` and in whole
// batches: what micro-batching must not change (up to float32 reordering).
inline std::pair<std::vector<float>, std::vector<float>> micro_and_whole(const std::string& network, int micro) {
  TrainConfig whole = small_run();
  whole.network = network;
  whole.micro_batch = whole.batch;
  TrainConfig part = whole;
  part.micro_batch = micro;
  const auto data = synthetic_data(whole);
  Trainer a(part, data), b(whole, data);
  a.fit();
  b.fit();
  auto weights = [](Trainer& t) {
    const auto* p = static_cast<const float*>(t.params().data_block());
    return std::vector<float>(p, p + t.params().bytes() / sizeof(float));
  };
  if (a.micro_batch() != micro) throw Error("micro_and_whole: planned micro-batches of " +
                                            std::to_string(a.micro_batch()) + ", not " + std::to_string(micro));
  return {weights(a), weights(b)};
}

}  // namespace crumb::test
