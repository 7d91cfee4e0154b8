#include "tools/train/trials.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "engine/base/error.h"
#include "engine/base/rss.h"

namespace crumb::train {
namespace {

// At least this many timed steps and this much time, so fast models are not timed over a millisecond;
// at most kMaxSteps, so a trial stays short.
constexpr int kMinSteps = 3, kMaxSteps = 50;
constexpr double kMinSeconds = 1.0;

void check_size(const RunPlan& plan, const TrainConfig& run, int m) {
  const int batch = plan.batch;
  CRUMB_CHECK(m <= batch, "--sweep: micro-batch ", m, " is larger than the batch of ", batch,
              " samples (the training set holds only ", batch, ")");
  try {
    check_micro_batch(plan.graph, m, batch);
  } catch (const Error& e) {
    CRUMB_FAIL("--sweep: ", e.what());
  }
  const std::size_t need = measure_memory(plan.graph, m, run.optimizer, plan.device, 0, batch).total();
  CRUMB_CHECK(need <= plan.budget, "--sweep: micro-batch ", m, " needs ", format_bytes(need),
              ", which exceeds --memory-budget ", format_bytes(plan.budget));
}

Trial run_trial(const TrainConfig& run, const std::shared_ptr<const data::DataSplit>& data, int m) {
  // What the trial allocates and touches, over what the process already holds (the program, the dataset).
  const RssGrowth rss;
  TrainConfig cfg = run;
  cfg.micro_batch = m;
  cfg.strategy = Strategy::MicroBatch;  // exactly micro-batches of m, in memory
  cfg.drop_last = true;  // every timed step trains a full batch
  cfg.epochs = 1 << 20;
  // No checkpoint or log of the run's: a trial starts from fresh weights and writes nothing.
  cfg.save.clear();
  cfg.save_every = 0;
  cfg.load.clear();
  cfg.resume.clear();
  cfg.fresh_optimizer = false;
  cfg.log.clear();
  Trainer t(cfg, data);
  int epoch = 0;
  t.start_epoch(epoch);
  auto step = [&] {
    StepInfo info;
    while (!t.train_batch(info)) t.start_epoch(++epoch);
  };
  step();  // warm-up: first touches of the arena and parameters, lazily built kernel state
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  Trial trial;
  trial.micro_batch = m;
  double seconds = 0;
  while (trial.steps < kMinSteps || (seconds < kMinSeconds && trial.steps < kMaxSteps)) {
    step();
    ++trial.steps;
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  trial.step_seconds = seconds / trial.steps;
  trial.samples_per_s = t.batch() / trial.step_seconds;
  trial.rss_bytes = rss.peak_bytes();
  return trial;
}

}  // namespace

std::vector<Trial> run_trials(const TrainConfig& run, std::shared_ptr<const data::DataSplit> data,
                              const RunPlan& plan, std::vector<int> sizes) {
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (int m : sizes) check_size(plan, run, m);
  std::vector<Trial> trials;
  for (int m : sizes) {
    trials.push_back(run_trial(run, data, m));
    const Trial& t = trials.back();
    std::fprintf(stderr, "sweep: micro-batch %d: %.0f samples/s (%d steps of %.1f ms), RSS grew by %s\n", m,
                 t.samples_per_s, t.steps, t.step_seconds * 1e3, format_bytes(t.rss_bytes).c_str());
  }
  return trials;
}

}  // namespace crumb::train
