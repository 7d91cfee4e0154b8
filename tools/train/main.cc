// train: the command line over the Trainer (engine/train/trainer.h): flags -> config -> fit -> summary.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "engine/base/error.h"
#include "engine/base/rss.h"
#include "engine/io/output_file.h"
#include "engine/train/progress.h"
#include "engine/train/run_files.h"
#include "engine/train/signals.h"
#include "engine/train/summary.h"
#include "engine/train/trainer.h"
#include "tools/train/flags.h"
#include "tools/train/report.h"
#include "tools/train/trials.h"

namespace crumb::train {
namespace {

// The report's data for the chosen plan, titled by model, input shape and device.
ReportData report_data(const TrainConfig& c, const RunPlan& p, const std::vector<int>& trial_sizes) {
  ReportData r = collect_report(p.graph, p.strategy.plan, p.batch, p.budget, c.optimizer, p.device, trial_sizes);
  std::string shape;
  for (int64_t d : p.graph.value(p.graph.inputs()[0]).dims) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  r.title = c.model + " (" + shape + ") on " + device_name(p.device) + ", " + precision_name(c.precision);
  r.subtitle = p.split;
  return r;
}

// The Trainer's config for the options, with the files train itself reads and writes (--model-file, the
// report, --explain-csv): the Trainer checks that no output, --save and --log included, replaces an input
// or another output; train checks the same at once, before it reads anything. --explain writes only its
// own files.
TrainConfig config_with_files(const Options& o) {
  TrainConfig c = o.config;
  const std::vector<FileUse> report = report_outputs(o.report, o.report_dir);
  c.files.insert(c.files.end(), report.begin(), report.end());
  if (!o.model_file.empty()) c.files.push_back({"--model-file", o.model_file, false, ""});
  if (o.explain) {
    c.save.clear();
    c.log.clear();
    if (!o.explain_csv.empty()) c.files.push_back({"--explain-csv", o.explain_csv, true, ""});
  }
  return c;
}

// --explain: the plan of the run, from the data's shape alone (its files are not read).
int explain(const Options& o, const TrainConfig& c) {
  ReportOutput report(o.report, o.report_dir);
  const RunPlan p = plan_run(c, data::data_shape(c.data), c.batch, pick_device(c));
  std::cout << c.model << " on " << device_name(p.device) << " in " << precision_name(c.precision)
            << (uses_channels_last(c, p.device) ? ", channels-last" : "") << ", " << p.split << "\n";
  write_strategy_report(std::cout, p.graph, p.strategy);
  write_memory_report(std::cout, p.graph, p.strategy.plan.memory, p.strategy.plan.train.plan, p.budget);
  std::optional<Frontier> frontier;
  if (o.frontier) {
    frontier = plan_frontier(c, data::data_shape(c.data), c.batch, p.device, p.strategy.plan.micro_batch);
    write_frontier(std::cout, *frontier, p.budget);
  }
  if (!o.explain_csv.empty()) {
    std::ostringstream csv;
    write_timeline_csv(csv, p.graph, p.strategy.plan.train.plan);
    write_file_atomically(o.explain_csv, {csv.str()}, "--explain-csv");
  }
  if (report.wanted()) {
    ReportData r = report_data(c, p, {});
    r.frontier = std::move(frontier);  // the points printed above, not measured again
    report.write(r);
  }
  return 0;
}

// comm: set to the ranks this process was launched among (mpirun), for main() to stop them on an error.
int run(const Options& o, std::shared_ptr<Communicator>& comm) {
  // Before training there is nothing to save: a signal ends the process at once; during fit it stops the
  // run at the next step and saves (engine/train/signals.h).
  catch_interrupts();
  const TrainConfig cfg = config_with_files(o);
  check_run_files(cfg);
  if (o.explain) return explain(o, cfg);
  // Checked before the data loads, so a bad path fails at once.
  ReportOutput report(o.report, o.report_dir);
  comm = connect_ranks(pick_device(cfg), cfg.dist_timeout);
  auto data = std::make_shared<const data::DataSplit>(data::load_data(cfg.data));
  Trainer t(cfg, data, comm);
  CRUMB_CHECK(t.ranks() == 1 || o.sweep.empty(), "--sweep measures one process: run it without mpirun");
  std::vector<Trial> trials;
  if (!o.sweep.empty()) trials = run_trials(cfg, data, t.plan(), o.sweep);
  // The plans move into the scheduler when the trainer prepares: the report takes what it draws now.
  std::optional<ReportData> report_plan;
  if (t.lead() && report.wanted()) report_plan = report_data(cfg, t.plan(), o.sweep);
  if (report_plan) report_plan->trials = trials;
  // What the run allocates, without the trials, the program or the dataset.
  const RssGrowth rss;
  t.prepare();
  if (t.lead()) {
    for (const std::string& w : t.warnings()) std::fprintf(stderr, "train: warning: %s\n", w.c_str());
    if (!cfg.resume.empty())
      std::fprintf(stderr, "resuming %s at epoch %d, batch %d (optimizer step %lld)\n", cfg.resume.c_str(),
                   t.start_epoch_index() + 1, t.start_batch_index() + 1, t.optimizer().steps());
  }
  // The Trainer writes --log (TrainConfig::log).
  Progress progress;
  const FitResult r = t.fit({&progress});
  if (r.stopped) {
    const int signal = r.signal ? r.signal : SIGTERM;
    if (t.lead())
      std::fprintf(stderr, "train: interrupted by %s after optimizer step %lld; %s\n",
                   signal == SIGINT ? "SIGINT" : "SIGTERM", t.optimizer().steps(),
                   cfg.save.empty() ? "nothing was saved (no --save)" : ("saved " + cfg.save).c_str());
    return 128 + signal;
  }
  if (!t.lead()) return 0;
  if (report_plan) {
    report_plan->measured = Measured{r.steps, r.train_seconds, r.samples_per_s(), rss.peak_bytes(), max_rss_bytes(),
                                     r.test.accuracy};
    // The weights are saved by now: a report that cannot be written costs the run nothing more.
    try {
      report.write(*report_plan);
    } catch (const Error& e) {
      std::fprintf(stderr, "train: warning: %s; the training finished (summary below)\n", e.what());
    }
  }
  std::printf("%s\n", to_json(summarize(t, r)).c_str());
  return 0;
}

}  // namespace
}  // namespace crumb::train

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) then fails the write with EFBIG, reported as one error line, instead
  // of killing the process mid-save.
  std::signal(SIGXFSZ, SIG_IGN);
  crumb::train::Options o;
  std::shared_ptr<crumb::Communicator> comm;  // under mpirun: the other ranks, stopped on an error here
  // The rank that fails says why and stops the others, which would otherwise wait for it.
  auto fail = [&](int code) {
    if (comm && !comm->failed_together()) comm->abort(code);
    return code;
  };
  bool help = false;
  try {
    std::string model_file;
    const crumb::Settings given = crumb::train::parse_flags(argc, argv, &model_file);
    help = crumb::train::wants_help(given);
    if (!help) o = crumb::train::options_of(given);
    o.model_file = model_file;
  } catch (const crumb::Error& e) {
    std::fprintf(stderr, "train: error: %s\n", e.what());
    return 2;
  }
  // What went to stdout (the summary, the plan, the help) must have arrived: a full disk or a closed pipe
  // is an error, not a silent success.
  auto flushed = [](int code) {
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "train: error: cannot write to stdout: %s\n", std::strerror(errno));
      return code == 0 ? 1 : code;
    }
    return code;
  };
  if (help) {
    std::fputs(crumb::train::usage().c_str(), stdout);
    return flushed(0);
  }
  try {
    return flushed(crumb::train::run(o, comm));
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "train: error: out of host memory (lower --batch, --micro-batch or --memory-budget)\n");
    return fail(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: error: %s\n", e.what());
    return fail(1);
  }
}
