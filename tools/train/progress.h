// Progress of an epoch on stderr: a redrawn bar on a terminal, a plain line every ~10% otherwise
// (logs and CI stay readable).
#pragma once
#include <chrono>
#include <string>

namespace crumb::train {

class Progress {
 public:
  Progress(int epoch, int epochs, int total_batches);
  // After each batch: running mean loss and samples/s so far.
  void update(int done_batches, double mean_loss, double samples_per_s);
  void finish();

 private:
  int epoch_, epochs_, total_;
  bool tty_;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace crumb::train
