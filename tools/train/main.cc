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

#include "engine/base/error.h"
#include "engine/base/rss.h"
#include "engine/io/output_file.h"
#include "engine/train/progress.h"
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

// Every file the run reads or writes, checked against each other before any is opened: no output may
// destroy an input or another output. --save may replace the --resume checkpoint it continues (read
// whole before the first save, then replaced atomically).
void check_files(const Options& o) {
  std::vector<FileUse> uses = report_outputs(o.report, o.report_dir);
  auto checkpoint = [&](const std::string& flag, const std::string& path, bool output) {
    if (path.empty()) return;
    uses.push_back({flag, path, output, output ? "--resume" : ""});
    uses.push_back(
        {flag + "'s optimizer file", optimizer_path(path), output, output ? "--resume's optimizer file" : ""});
    uses.push_back({flag + "'s previous optimizer file", previous_optimizer_path(path), output,
                    output ? "--resume's previous optimizer file" : ""});
  };
  const TrainConfig& c = o.config;
  if (o.explain) {
    if (!o.explain_csv.empty()) uses.push_back({"--explain-csv", o.explain_csv, true, ""});
  } else {
    checkpoint("--save", c.save, true);
    if (!c.log.empty()) uses.push_back({"--log", c.log, true, ""});
  }
  checkpoint("--load", c.load, false);
  checkpoint("--resume", c.resume, false);
  for (const std::string& f : data::data_files(c.data)) uses.push_back({"--data", f, false, ""});
  check_file_uses(uses);
}

// --explain: the plan of the run, from the data's shape alone (its files are not read).
int explain(const Options& o) {
  ReportOutput report(o.report, o.report_dir);
  const TrainConfig& c = o.config;
  const RunPlan p = plan_run(c, data::data_shape(c.data), c.batch, pick_device(c));
  std::cout << c.model << " on " << device_name(p.device) << " in " << precision_name(c.precision)
            << (uses_channels_last(c, p.device) ? ", channels-last" : "") << ", " << p.split << "\n";
  write_strategy_report(std::cout, p.graph, p.strategy);
  write_memory_report(std::cout, p.graph, p.strategy.plan.memory, p.strategy.plan.train.plan, p.budget);
  if (!o.explain_csv.empty()) {
    std::ostringstream csv;
    write_timeline_csv(csv, p.graph, p.strategy.plan.train.plan);
    write_file_atomically(o.explain_csv, {csv.str()}, "--explain-csv");
  }
  if (report.wanted()) report.write(report_data(c, p, {}));
  return 0;
}

// comm: set to the ranks this process was launched among (mpirun), for main() to stop them on an error.
int run(const Options& o, std::shared_ptr<Communicator>& comm) {
  // Before training there is nothing to save: a signal ends the process at once; during fit it stops the
  // run at the next step and saves (engine/train/signals.h).
  catch_interrupts();
  check_files(o);
  if (o.explain) return explain(o);
  // Checked before the data loads, so a bad path fails at once.
  ReportOutput report(o.report, o.report_dir);
  const TrainConfig& cfg = o.config;
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
    const crumb::Settings given = crumb::train::parse_flags(argc, argv);
    help = crumb::train::wants_help(given);
    if (!help) o = crumb::train::options_of(given);
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
