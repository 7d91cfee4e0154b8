#include "engine/train/run_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/base/error.h"
#include "engine/io/json.h"

namespace crumb {

RunLog::RunLog(const std::string& path, bool append) : path_(path) {
  open(O_WRONLY | (append ? O_APPEND : O_TRUNC));
}

RunLog::RunLog(const std::string& path, int resume_epoch, int resume_batch) : path_(path) {
  open(O_RDWR | O_APPEND);
  try {
    drop_from(resume_epoch, resume_batch);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

void RunLog::open(int flags) {
  // Never through a link; O_NONBLOCK: a FIFO without a reader fails at once instead of blocking the run
  // (and one with a reader is refused below).
  fd_ = ::open(path_.c_str(), flags | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  CRUMB_CHECK(fd_ >= 0, "--log: cannot write ", path_, ": ",
              errno == ELOOP ? "it is a symbolic link (name the file itself)" : std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    CRUMB_FAIL("--log: cannot write ", path_, ": not a regular file (a FIFO, socket or device)");
  }
}

namespace {
// The integer after "key": in a line this log wrote, or -1.
long long member(const std::string& line, const char* key) {
  const std::size_t at = line.find(key);
  if (at == std::string::npos) return -1;
  return std::strtoll(line.c_str() + at + std::strlen(key), nullptr, 10);
}

// Whether a line of the log (its first bytes) is a step from the resumed (epoch, batch) on, or the end of
// an epoch from the resumed one on: what the resumed run logs again.
bool trained_again(const std::string& head, int epoch, int batch) {
  const long long e = member(head, "\"epoch\":") - 1, b = member(head, "\"batch\":") - 1;  // 1-based in the log
  if (head.rfind("{\"event\":\"step\",", 0) == 0) return e > epoch || (e == epoch && b >= batch);
  return head.rfind("{\"event\":\"epoch\",", 0) == 0 && e >= epoch;
}
}  // namespace

void RunLog::drop_from(int epoch, int batch) {
  // The file's tail from the end of the last line to keep goes: the lines of this run from the resumed
  // batch on come last (earlier runs' lines, in a log that Python's trainers appended to, stay wherever
  // they match), and so does a line cut short. Streamed, and only each line's first bytes kept (this log
  // names the event, epoch and batch first), so a log of any size or line length takes constant memory.
  constexpr std::size_t kHead = 256;
  std::string head;
  off_t keep = 0, at = 0;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::pread(fd_, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) continue;
    CRUMB_CHECK(n >= 0, "--log: cannot read ", path_, " to continue it: ", std::strerror(errno));
    if (n == 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        if (head.size() < kHead) head += buf[i];
        continue;
      }
      if (!trained_again(head, epoch, batch)) keep = at + i + 1;
      head.clear();
    }
    at += n;
  }
  if (keep < at)
    CRUMB_CHECK(::ftruncate(fd_, keep) == 0, "--log: cannot cut ", path_, " back to the resumed step: ",
                std::strerror(errno));
}

RunLog::~RunLog() {
  if (fd_ >= 0) ::close(fd_);
}

void RunLog::write(std::string line) {
  if (fd_ < 0) return;
  line += '\n';
  for (std::size_t done = 0; done < line.size();) {
    const ssize_t w = ::write(fd_, line.data() + done, line.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      // The log is a by-product: a full disk or a file-size limit must not cost the training.
      std::fprintf(stderr, "train: warning: --log: cannot write %s: %s; no more lines are logged, the run goes on\n",
                   path_.c_str(), w < 0 ? std::strerror(errno) : "nothing written");
      ::close(fd_);
      fd_ = -1;
      return;
    }
    done += static_cast<std::size_t>(w);
  }
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
  json::ObjectWriter w;
  w.string("event", "epoch").integer("epoch", e.epoch + 1).number("train_loss", e.train_loss);
  // No evaluation (no test data, or one a signal cut short): no test figures rather than zeros.
  if (e.test.samples > 0) w.number("test_loss", e.test.loss).number("test_accuracy", e.test.accuracy);
  write(w.number("seconds", e.seconds).str());
}

}  // namespace crumb
