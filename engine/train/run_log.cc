#include "engine/train/run_log.h"

#include <cerrno>
#include <cstring>

#include "engine/base/error.h"
#include "engine/io/json.h"

namespace crumb {

RunLog::RunLog(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "w");
  CRUMB_CHECK(file_, "--log: cannot write ", path, ": ", std::strerror(errno));
}

RunLog::~RunLog() {
  if (file_) std::fclose(file_);
}

void RunLog::write(const std::string& line) {
  const bool ok = std::fputs(line.c_str(), file_) >= 0 && std::fputc('\n', file_) != EOF && std::fflush(file_) == 0;
  CRUMB_CHECK(ok, "--log: cannot write ", path_, ": ", std::strerror(errno));
}

// Steps count optimizer steps from 1 over the whole run (resumed ones included); epochs and batches from 1.
void RunLog::on_step(Trainer& t, const StepInfo& s) {
  json::ObjectWriter w;
  w.string("event", "step")
            .integer("step", s.step)
            .integer("epoch", s.epoch + 1)
            .integer("batch", s.batch + 1)
            .number("loss", s.loss)
            .number("lr", s.lr)
            .number("samples_per_s", s.samples_per_s)
            .integer("micro_batch", t.micro_batch())
            .integer("arena_bytes", static_cast<long long>(t.arena_bytes()))
            .integer("max_rss_bytes", static_cast<long long>(max_rss_bytes()));
  if (t.loss_scaler().enabled())
    w.number("loss_scale", s.loss_scale).boolean("skipped", s.skipped).integer("skipped_steps", t.loss_scaler().skipped());
  write(w.str());
}

void RunLog::on_epoch_end(Trainer&, const EpochInfo& e) {
  write(json::ObjectWriter()
            .string("event", "epoch")
            .integer("epoch", e.epoch + 1)
            .number("train_loss", e.train_loss)
            .number("test_loss", e.test.loss)
            .number("test_accuracy", e.test.accuracy)
            .number("seconds", e.seconds)
            .str());
}

}  // namespace crumb
