// A fit() callback: one JSON object per line (train --log FILE.jsonl), per optimizer step and per epoch,
// written and flushed as the run goes, so a plot (or `tail -f`) sees it live and a killed run keeps every
// line it wrote. A write that fails (full disk, file-size limit) warns once and ends the log, not the run.
//   {"event":"step","step":..,"epoch":..,"batch":..,"loss":..,"lr":..,"samples_per_s":..,
//    "micro_batch":..,"arena_bytes":..,"max_rss_bytes":..}
//   {"event":"epoch","epoch":..,"train_loss":..,"test_loss":..,"test_accuracy":..,"seconds":..}
// (seconds: the epoch's training and evaluation; a non-finite number is written as null)
#pragma once
#include <cstddef>
#include <string>

#include "engine/base/rss.h"
#include "engine/train/trainer.h"

namespace crumb {

class RunLog : public Callback {
 public:
  // Creates path, or truncates it (append: adds to it); an unwritable path, a symbolic link or anything but
  // a regular file is an error naming it.
  explicit RunLog(const std::string& path, bool append = false);
  // A run resumed at (epoch, batch), 0-based, the next batch it trains: its steps continue the log's. The
  // log's last lines from that batch on go first (those a killed run logged after its last save, which
  // this run trains again), with a line cut short.
  RunLog(const std::string& path, int resume_epoch, int resume_batch);
  ~RunLog() override;
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  void on_step(Trainer& t, const StepInfo& s) override;
  void on_epoch_end(Trainer& t, const EpochInfo& e) override;

 private:
  void open(int flags);
  void drop_from(int epoch, int batch);
  void write(std::string line);
  std::string path_;
  int fd_ = -1;  // -1 once a write failed
};

}  // namespace crumb
