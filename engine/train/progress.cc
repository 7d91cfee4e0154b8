#include "engine/train/progress.h"

#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "engine/dist/batch_share.h"

namespace crumb {

Progress::Progress() : tty_(isatty(STDERR_FILENO)) {}

void Progress::on_fit_begin(Trainer& t) {
  const RunPlan& p = t.plan();
  if (!p.strategy.choice.swapped.empty() || !p.strategy.choice.recomputed.empty()) {
    std::ostringstream os;
    write_strategy_report(os, t.graph(), p.strategy);
    std::fputs(os.str().c_str(), stderr);
  }
  const std::string device = backend(t.device()).description();
  if (device != device_name(t.device())) std::fprintf(stderr, "device: %s\n", device.c_str());
  const MemoryPlan& plan = t.scheduler().train_executor().plan();
  std::fprintf(stderr,
               "%s on %s: %lld parameters, batch %d in micro-batches of %d, arena %s (training plan %s, lower bound "
               "%s, ratio %.3f), %d threads\n",
               t.config().model.c_str(), device_name(t.device()), static_cast<long long>(t.params().num_parameters()),
               t.batch(), t.micro_batch(), format_bytes(t.arena_bytes()).c_str(), format_bytes(plan.arena_bytes).c_str(),
               format_bytes(plan.lower_bound).c_str(), plan.ratio(), t.config().threads);
  if (t.reducer()) {
    const int ranks = t.ranks();
    std::fprintf(stderr, "data parallel: %d ranks, shares of %d to %d samples, gradients summed in %zu buckets\n",
                 ranks, t.share_of(t.batch(), ranks - 1).size, t.share_of(t.batch(), 0).size,
                 t.reducer()->buckets().size());
  }
  epochs_ = t.config().epochs;
}

void Progress::on_epoch_begin(Trainer&, int epoch) {
  epoch_ = epoch + 1;
  last_decile_ = -1;
  last_draw_ = {};
}

void Progress::on_step(Trainer& t, const StepInfo& s) {
  const int done = s.batch + 1, total = s.batches;
  // fp16: the loss scale, and how many steps its overflows skipped.
  char scale[64] = "";
  if (t.loss_scaler().enabled())
    std::snprintf(scale, sizeof scale, " scale %g skipped %lld", s.loss_scale, t.loss_scaler().skipped());
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (done != total && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const int filled = total ? done * kWidth / total : kWidth;
    std::string bar(filled, '=');
    if (filled < kWidth) bar += '>' + std::string(kWidth - filled - 1, ' ');
    std::fprintf(stderr, "\repoch %d/%d [%s] %d/%d loss %.4f %.0f samples/s%s ", epoch_, epochs_, bar.c_str(), done,
                 total, s.epoch_loss, s.samples_per_s, scale);
    std::fflush(stderr);
    bar_open_ = true;
    return;
  }
  const int decile = total ? done * 10 / total : 10;
  if (decile == last_decile_ || (decile == 10 && done != total)) return;
  last_decile_ = decile;
  std::fprintf(stderr, "epoch %d/%d batch %d/%d loss %.4f %.0f samples/s%s\n", epoch_, epochs_, done, total,
               s.epoch_loss, s.samples_per_s, scale);
}

void Progress::end_bar() {
  if (bar_open_) std::fputc('\n', stderr);
  bar_open_ = false;
}

void Progress::on_epoch_end(Trainer&, const EpochInfo& e) {
  end_bar();
  // No evaluation (no test data, or one a signal cut short): no test figures rather than zeros.
  if (e.test.samples > 0)
    std::fprintf(stderr, "epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.4f, %.0f samples/s\n",
                 e.epoch + 1, epochs_, e.train_loss, e.test.loss, e.test.accuracy, e.samples_per_s);
  else
    std::fprintf(stderr, "epoch %d/%d: train loss %.4f, %.0f samples/s\n", e.epoch + 1, epochs_, e.train_loss,
                 e.samples_per_s);
}

void Progress::on_fit_end(Trainer& t, bool, int) {
  end_bar();
  // Rank 0's view of the gradient sums: how long they took, and how much of that the backward hid.
  if (const GradientReducer* r = t.reducer()) {
    const GradientReducer::Timing& tm = r->timing();
    std::fprintf(stderr,
                 "data parallel: gradient sums took %.3f s over %lld steps, %.3f s of it waiting after the backward "
                 "(%.0f%% hidden)\n",
                 tm.span_seconds, tm.batches, tm.waited_seconds,
                 tm.span_seconds > 0 ? 100.0 * (1.0 - tm.waited_seconds / tm.span_seconds) : 0.0);
  }
}

}  // namespace crumb
