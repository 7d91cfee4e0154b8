#include "tools/train/run_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "engine/base/error.h"

namespace crumb::train {
namespace {
// JSON has no NaN or infinity: a diverged loss is written as null.
std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}
}  // namespace

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

void RunLog::step(long long step, int epoch, int batch, double loss, double lr, double samples_per_s, int micro_batch,
                  std::size_t arena_bytes) {
  write("{\"event\":\"step\",\"step\":" + std::to_string(step) + ",\"epoch\":" + std::to_string(epoch) +
        ",\"batch\":" + std::to_string(batch) + ",\"loss\":" + number(loss) + ",\"lr\":" + number(lr) +
        ",\"samples_per_s\":" + number(samples_per_s) + ",\"micro_batch\":" + std::to_string(micro_batch) +
        ",\"arena_bytes\":" + std::to_string(arena_bytes) + ",\"max_rss_bytes\":" + std::to_string(max_rss_bytes()) +
        "}");
}

void RunLog::epoch(int epoch, double train_loss, double test_loss, double test_accuracy, double seconds) {
  write("{\"event\":\"epoch\",\"epoch\":" + std::to_string(epoch) + ",\"train_loss\":" + number(train_loss) +
        ",\"test_loss\":" + number(test_loss) + ",\"test_accuracy\":" + number(test_accuracy) +
        ",\"seconds\":" + number(seconds) + "}");
}

}  // namespace crumb::train
