#include "tools/train/trials.h"

#include <chrono>
#include <cstdio>

#include "engine/device/arena.h"
#include "engine/strategy/memory_report.h"
#include "engine/run/params.h"
#include "engine/train/scheduler.h"
#include "tools/train/rss.h"

namespace crumb::train {
namespace {

// At least this many timed steps and this much time, so fast models are not timed over a millisecond;
// at most kMaxSteps, so a trial stays short.
constexpr int kMinSteps = 3, kMaxSteps = 50;
constexpr double kMinSeconds = 1.0;

Trial run_trial(const Graph& g, int m, const TrialSetup& s) {
  // What the trial allocates and touches, over what the process already holds (the program, the dataset).
  const RssGrowth rss;
  MicroBatchPlan plan = plan_micro_batch(g, m, s.optimizer, s.device);
  ParamStore params(g, s.device);
  params.init(s.seed);
  const std::unique_ptr<Optimizer> opt = make_optimizer(params, s.optimizer);
  opt->set_total_steps(kMaxSteps + 1);
  Arena arena(s.device);
  Scheduler sched(g, params, arena, std::move(plan.train), std::move(plan.eval));
  // Full batches only (drop_last), restarting epochs as needed: every timed step trains s.batch samples.
  data::Loader loader(*s.train, s.batch, s.norm, /*shuffle=*/true, s.seed, /*drop_last=*/true,
                      s.device == Device::CPU ? Memory::Host : Memory::Pinned);
  loader.set_micro_batch(m);
  int epoch = 0;
  loader.start_epoch(epoch);
  auto step = [&] {
    data::Batch b;
    while (!loader.next(b)) loader.start_epoch(++epoch);
    sched.train_batch(loader, b.size);
    opt->step();
  };
  step();  // warm-up: first touches of the arena and parameters, lazily built kernel state
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  Trial t;
  t.micro_batch = m;
  double seconds = 0;
  while (t.steps < kMinSteps || (seconds < kMinSeconds && t.steps < kMaxSteps)) {
    step();
    ++t.steps;
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  t.step_seconds = seconds / t.steps;
  t.samples_per_s = s.batch / t.step_seconds;
  t.rss_bytes = rss.peak_bytes();
  return t;
}

}  // namespace

std::vector<Trial> run_trials(const Graph& g, const std::vector<int>& sizes, const TrialSetup& setup) {
  std::vector<Trial> trials;
  for (int m : sizes) {
    trials.push_back(run_trial(g, m, setup));
    const Trial& t = trials.back();
    std::fprintf(stderr, "sweep: micro-batch %d: %.0f samples/s (%d steps of %.1f ms), RSS grew by %s\n", m,
                 t.samples_per_s, t.steps, t.step_seconds * 1e3, format_bytes(t.rss_bytes).c_str());
  }
  return trials;
}

}  // namespace crumb::train
