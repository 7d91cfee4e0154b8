// Trains lenet5 on Fashion-MNIST with Crumb as an installed library: find_package(Crumb) and the target
// Crumb::crumb (CMakeLists.txt next to this file), through the Trainer.
//   train_lenet5 [steps, default 300] [Fashion-MNIST folder, default data::default_data_dir()]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/base/error.h"
#include "engine/train/trainer.h"

using namespace crumb;

// Prints the mean training loss every 100 optimizer steps.
class EveryHundred : public Callback {
 public:
  void on_step(Trainer&, const StepInfo& s) override {
    if (s.step % 100 == 0) std::printf("step %lld: train loss %.4f\n", s.step, s.epoch_loss);
  }
};

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  TrainConfig cfg;
  cfg.model = "lenet5";
  if (argc > 2) cfg.data.dir = argv[2];
  cfg.batch = 64;
  cfg.data.limit_train = steps * cfg.batch;  // one epoch of `steps` batches
  cfg.optimizer.lr = 0.05;
  cfg.optimizer.momentum = 0.9;
  cfg.seed = 1;
  Trainer trainer(cfg);
  EveryHundred every_hundred;
  const FitResult r = trainer.fit({&every_hundred});
  std::printf("test: loss %.4f, accuracy %.3f\n", r.test.loss, r.test.accuracy);
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "train_lenet5: %s\n", e.what());
  return 1;
}
