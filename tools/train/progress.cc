#include "tools/train/progress.h"

#include <unistd.h>

#include <cstdio>

namespace crumb::train {

Progress::Progress(int epoch, int epochs, int total_batches)
    : epoch_(epoch), epochs_(epochs), total_(total_batches), tty_(isatty(STDERR_FILENO)) {}

void Progress::update(int done, double mean_loss, double samples_per_s) {
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (done != total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const int filled = total_ ? done * kWidth / total_ : kWidth;
    std::string bar(filled, '=');
    if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
    std::fprintf(stderr, "\repoch %d/%d [%s] %d/%d loss %.4f %.0f samples/s ", epoch_, epochs_, bar.c_str(), done,
                 total_, mean_loss, samples_per_s);
    std::fflush(stderr);
    return;
  }
  const int decile = total_ ? done * 10 / total_ : 10;
  if (decile == last_decile_ || (decile == 10 && done != total_)) return;
  last_decile_ = decile;
  std::fprintf(stderr, "epoch %d/%d batch %d/%d loss %.4f %.0f samples/s\n", epoch_, epochs_, done, total_, mean_loss,
               samples_per_s);
}

void Progress::finish() {
  if (tty_) std::fputc('\n', stderr);
}

}  // namespace crumb::train
