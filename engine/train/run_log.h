// A fit() callback: one JSON object per line (train --log FILE.jsonl), per optimizer step and per epoch,
// written and flushed as the run goes, so a plot (or `tail -f`) sees it live and a killed run keeps every
// line it wrote.
//   {"event":"step","step":..,"epoch":..,"batch":..,"loss":..,"lr":..,"samples_per_s":..,
//    "micro_batch":..,"arena_bytes":..,"max_rss_bytes":..}
//   {"event":"epoch","epoch":..,"train_loss":..,"test_loss":..,"test_accuracy":..,"seconds":..}
// (seconds: the epoch's training and evaluation; a non-finite number is written as null)
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

#include "engine/base/rss.h"
#include "engine/train/trainer.h"

namespace crumb {

class RunLog : public Callback {
 public:
  // Creates or truncates path; an unwritable path is an error naming it.
  explicit RunLog(const std::string& path);
  ~RunLog() override;
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  void on_step(Trainer& t, const StepInfo& s) override;
  void on_epoch_end(Trainer& t, const EpochInfo& e) override;

 private:
  void write(const std::string& line);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace crumb
