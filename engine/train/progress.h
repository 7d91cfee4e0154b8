// Progress on stderr, as a fit() callback: what the run is (device, model, plan) when it starts, each
// epoch as a redrawn bar on a terminal or a plain line every ~10% otherwise (logs and CI stay
// readable), each epoch's losses and accuracy, and how the gradient sums over ranks went.
#pragma once
#include <chrono>

#include "engine/train/trainer.h"

namespace crumb {

class Progress : public Callback {
 public:
  Progress();
  void on_fit_begin(Trainer& t) override;
  void on_epoch_begin(Trainer& t, int epoch) override;
  void on_step(Trainer& t, const StepInfo& s) override;
  void on_epoch_end(Trainer& t, const EpochInfo& e) override;
  void on_fit_end(Trainer& t, bool stopped, int stopped_by) override;

 private:
  void end_bar();
  bool tty_;
  int epoch_ = 0, epochs_ = 0;
  bool bar_open_ = false;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace crumb
