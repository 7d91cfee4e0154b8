// A small Trainer run on synthetic data, shared by the in-process Trainer tests: shuffled and augmented
// batches, a short last batch (90 samples in batches of 16), a step schedule and momentum, which is
// everything a resume must restore.
#pragma once
#include <memory>

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

}  // namespace crumb::test
