// --log FILE.jsonl: one JSON object per line, per optimizer step and per epoch, written and flushed as
// the run goes, so a plot (or `tail -f`) sees it live and a killed run keeps every line it wrote.
//   {"event":"step","step":..,"epoch":..,"batch":..,"loss":..,"lr":..,"samples_per_s":..,
//    "micro_batch":..,"arena_bytes":..,"max_rss_bytes":..}
//   {"event":"epoch","epoch":..,"train_loss":..,"test_loss":..,"test_accuracy":..,"seconds":..}
// (seconds: the epoch's training and evaluation; a non-finite number is written as null)
#pragma once
#include <cstddef>
#include <cstdio>
#include <string>

#include "tools/train/rss.h"

namespace crumb::train {

class RunLog {
 public:
  // Creates or truncates path; an unwritable path is an error naming it.
  explicit RunLog(const std::string& path);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  // step counts optimizer steps from 1 over the whole run (resumed ones included); batch is 1-based.
  void step(long long step, int epoch, int batch, double loss, double lr, double samples_per_s, int micro_batch,
            std::size_t arena_bytes);
  void epoch(int epoch, double train_loss, double test_loss, double test_accuracy, double seconds);

 private:
  void write(const std::string& line);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace crumb::train
