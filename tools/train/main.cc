// train: the CLI that trains a reference model on Fashion-MNIST through Crumb's graph executor.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <iostream>
#include <sstream>
#include <string>

#include "engine/graph/autograd.h"
#include "engine/device/backend.h"
#include "engine/dist/batch_share.h"
#include "engine/io/checkpoint.h"
#include "engine/dist/communicator.h"
#include "engine/data/cifar.h"
#include "engine/data/idx.h"
#include "engine/data/loader.h"
#include "engine/data/npy.h"
#include "engine/base/error.h"
#include "engine/dist/grad_reducer.h"
#include "engine/strategy/memory_report.h"
#include "engine/strategy/memory_strategy.h"
#include "engine/optim/optimizer.h"
#include "engine/graph/rng.h"
#include "engine/train/scheduler.h"
#include "engine/base/threads.h"
#include "models/registry.h"
#include "tools/train/flags.h"
#include "tools/train/interrupt.h"
#include "tools/train/progress.h"
#include "tools/train/report.h"
#include "tools/train/rss.h"
#include "tools/train/run_log.h"
#include "tools/train/trials.h"

namespace crumb::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The model's input shape and class count (the dataset's), its normalisation and dropout (the flags').
models::ModelSpec model_spec(const Options& o, int channels, int height, int width, int classes) {
  return {channels, height, width, classes, o.norm, o.dropout};
}

// The input shape and class count of the dataset a run reads, without reading its data: IDX images from
// their header where the folder has them (Fashion-MNIST's 28x28 where it has none, so plans need no data).
models::ModelSpec planned_spec(const Options& o) {
  if (o.dataset == "cifar10") return model_spec(o, 3, 32, 32, 10);
  if (o.dataset == "synthetic") return model_spec(o, o.input[0], o.input[1], o.input[2], o.classes);
  if (o.dataset == "npy") {  // mapped: only the headers and the labels are read
    data::Dataset train, test;
    data::load_npy_dir(o.data, train, test);
    return model_spec(o, train.channels, train.height, train.width, train.num_classes);
  }
  const std::string dir = o.data.empty() ? data::default_data_dir() : o.data;
  if (!data::mnist_split_exists(dir, "train")) return model_spec(o, 1, 28, 28, 10);
  const std::vector<int> dims = data::mnist_image_dims(dir, "train");
  return model_spec(o, 1, dims[1], dims[2], 10);
}

// A BatchNorm group must fit in the batch it normalises.
void check_bn_group(const Options& o, int batch) {
  CRUMB_CHECK(!models::has_norm(o.model) || o.norm.kind != models::NormSpec::Kind::Batch || o.norm.bn.group <= batch,
              "--bn-group ", o.norm.bn.group, " is larger than the batch of ", batch,
              " samples (use a smaller --bn-group, --bn-group batch, or a larger --batch)");
}

// Synthetic images (engine/data/synthetic.h) of --input's shape and --classes classes: one generated set
// (so train and test share the class prototypes) cut into --limit-train and --limit-test samples.
void split_synthetic(const Options& o, data::Dataset& train, data::Dataset& test) {
  const int n_train = o.limit_train ? o.limit_train : 4096, n_test = o.limit_test ? o.limit_test : 1024;
  CRUMB_CHECK(int64_t{n_train} + n_test <= (1 << 30), "--limit-train + --limit-test is too large for synthetic data");
  data::Dataset all =
      data::make_synthetic(n_train + n_test, o.input[0], o.input[1], o.input[2], o.classes, o.seed + 0x5eed);
  // The test set takes only the shape and its own samples: copying `all` whole would double the peak.
  test.channels = all.channels;
  test.height = all.height;
  test.width = all.width;
  test.num_classes = all.num_classes;
  const std::size_t sample = static_cast<std::size_t>(all.sample_size());
  test.count = n_test;
  test.pixels.assign(all.pixels.begin() + n_train * sample, all.pixels.end());
  test.labels.assign(all.labels.begin() + n_train, all.labels.end());
  train = std::move(all);
  train.count = n_train;
  train.pixels.resize(n_train * sample);
  train.labels.resize(n_train);
}

void truncate(data::Dataset& ds, int limit) {
  if (limit > 0 && limit < ds.count) ds.keep_first(limit);
}

// Accuracy and mean loss over the test set.
struct Evaluation {
  double accuracy = 0, loss = 0;
};
Evaluation evaluate(Scheduler& sched, data::Loader& loader, int count) {
  loader.start_epoch(0);
  data::Batch b;
  int64_t correct = 0;
  double loss_sum = 0;
  while (loader.next(b)) {
    const BatchResult r = sched.evaluate(loader, b.size);
    correct += r.correct;
    loss_sum += r.loss_sum;
  }
  return {static_cast<double>(correct) / count, loss_sum / count};
}

// --device, or cuda when a GPU is usable.
Device pick_device(const Options& o) {
  if (o.device.empty()) return device_available(Device::CUDA) ? Device::CUDA : Device::CPU;
  const Device d = o.device == "cuda" ? Device::CUDA : Device::CPU;
  // Builds the CUDA context, which reports exactly why there is no usable device (or no CUDA build).
  if (d == Device::CUDA) backend(d);
  return d;
}

// --memory-budget, else 4 GiB on the CPU and 95% of the free device memory on CUDA (the rest is left
// to what cuDNN and the driver allocate for themselves, such as loaded kernels).
std::size_t budget_of(const Options& o, Device device) {
  if (o.memory_budget) return o.memory_budget;
  return device == Device::CPU ? kDefaultCpuBudget : backend(device).free_bytes() / 20 * 19;
}

// The micro-batch size (--micro-batch, or chosen for the budget) and what --strategy does to fit it, with
// the compiled passes; g is rewritten for swapping and recomputation.
StrategyPlan pick_micro_batch(const Options& o, Graph& g, int batch, Device device) {
  check_bn_group(o, batch);
  StrategyRequest r;
  r.strategy = o.strategy;
  r.batch = batch;
  r.budget = budget_of(o, device);
  r.micro_batch = o.micro_batch;
  r.optimizer = o.optimizer;
  r.device = device;
  return plan_strategy(g, r);
}

// "batch 64 in 1 micro-batch(es) of 64 (largest that fits the budget)": what --explain and the report say.
std::string batch_split(const Options& o, int batch, const StrategyPlan& p) {
  const int m = p.plan.micro_batch;
  const std::string how = o.micro_batch                      ? " (--micro-batch"
                          : p.choice.used == "micro-batch"    ? " (largest that fits the budget"
                          : o.strategy == Strategy::None      ? " (--strategy none"
                          : o.strategy == Strategy::Auto      ? " (the smallest allowed does not fit in memory"
                                                              : " (largest that fits with --strategy " +
                                                                    std::string(strategy_name(o.strategy));
  const bool rewritten = !p.choice.swapped.empty() || !p.choice.recomputed.empty();
  return "batch " + std::to_string(batch) + " in " + std::to_string((batch + m - 1) / m) + " micro-batch(es) of " +
         std::to_string(m) + how + (rewritten ? "; " + p.choice.used + " to fit)" : ")");
}

// The report's data for the chosen plan, titled by model, input shape and device.
ReportData report_data(const Options& o, const Graph& g, const StrategyPlan& p, int batch, Device device,
                       const std::vector<int>& trial_sizes) {
  ReportData r = collect_report(g, p.plan, batch, budget_of(o, device), o.optimizer, device, trial_sizes);
  std::string shape;
  for (int64_t d : g.value(g.inputs()[0]).dims) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  r.title = o.model + " (" + shape + ") on " + device_name(device);
  r.subtitle = batch_split(o, batch, p);
  return r;
}

// The --sweep sizes, sorted, each a valid micro-batch size for batches of `batch` that fits the budget.
std::vector<int> sweep_sizes(const Options& o, const Graph& g, int batch, Device device) {
  std::vector<int> sizes = o.sweep;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (int m : sizes) {
    CRUMB_CHECK(m <= batch, "--sweep: micro-batch ", m, " is larger than the batch of ", batch,
                " samples (the training set holds only ", batch, ")");
    try {
      check_micro_batch(g, m, batch);
    } catch (const Error& e) {
      CRUMB_FAIL("--sweep: ", e.what());
    }
    const std::size_t need = measure_memory(g, m, o.optimizer, device, 0, batch).total();
    CRUMB_CHECK(need <= budget_of(o, device), "--sweep: micro-batch ", m, " needs ", format_bytes(need),
                ", which exceeds --memory-budget ", format_bytes(budget_of(o, device)));
  }
  return sizes;
}

// The last optimizer step (the one before batch `batch` of `epoch`, 0-based) left every parameter finite.
// Checked once the next batch has run, when waiting for that step costs nothing: a ReLU maps NaN to 0,
// so a network whose weights went NaN can still report a finite loss.
void check_parameters_finite(Optimizer& opt, int epoch, int batch) {
  const uint64_t bad = opt.nonfinite_parameters();
  CRUMB_CHECK(bad == 0, "training diverged: ", bad, " parameters became NaN or infinite at optimizer step ",
              opt.steps(), " (epoch ", epoch + 1, ", before batch ", batch + 1,
              "); nothing was saved (lower --lr, or add --warmup-steps)");
}

// Writes --save, or, when that fails (disk full, folder gone), the same checkpoint under the system's
// temporary folder, saying where: a failed save never loses the run's weights.
// Where a run stands, recorded in its checkpoints so --resume continues there: the next batch to train
// (epoch and batch index), the flags, and what decides float rounding (threads, micro-batch size).
// The flags as one printable string: space-separated, with '%', spaces and control characters inside a
// flag percent-encoded.
std::string encode_args(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) {
    if (!out.empty()) out += ' ';
    for (unsigned char c : a) {
      if (c == '%' || c == ' ' || c < 0x20 || c == 0x7f) {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", c);
        out += hex;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  return out;
}

CheckpointMetadata run_metadata(const Options& o, int epoch, int batch, int micro_batch) {
  const std::string args = encode_args(o.args);
  return {{"train.args", args},
          {"train.epoch", std::to_string(epoch)},
          {"train.batch", std::to_string(batch)},
          {"train.threads", std::to_string(o.threads)},
          {"train.micro_batch", std::to_string(micro_batch)}};
}

std::string metadata_value(const CheckpointMetadata& meta, const std::string& key, const std::string& path) {
  for (const auto& [k, v] : meta)
    if (k == key) return v;
  CRUMB_FAIL(path, " records no run (no \"", key, "\" in its metadata): it was not saved by train --save; use --load ",
             path, " to start a new run from its weights");
}

int metadata_int(const CheckpointMetadata& meta, const std::string& key, const std::string& path) {
  const std::string v = metadata_value(meta, key, path);
  CRUMB_CHECK(!v.empty() && v.size() <= 9 && v.find_first_not_of("0123456789") == std::string::npos, path, ": \"",
              key, "\" is \"", v, "\", not a count");
  return std::stoi(v);
}

void save_or_rescue(const Options& o, ParamStore& params, Optimizer& opt, const CheckpointMetadata& run) {
  try {
    save_checkpoint(o.save, params, &opt, o.model, run);
  } catch (const Error& e) {
    const std::string rescue = (std::filesystem::temp_directory_path() /
                                ("crumb-rescue-" + std::to_string(::getpid()) + ".safetensors")).string();
    try {
      save_checkpoint(rescue, params, &opt, o.model, run);
    } catch (const Error&) {
      CRUMB_FAIL(e.what(), "; saving to ", rescue, " failed too: the weights are lost");
    }
    CRUMB_FAIL(e.what(), "; the weights were saved to ", rescue, " instead (--load it to continue)");
  }
}

}  // namespace

std::vector<std::string> recorded_args(const std::string& path) {
  const std::string text = metadata_value(checkpoint_metadata(path), "train.args", path);
  std::vector<std::string> args;
  std::string arg;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ' ') {
      args.push_back(arg);
      arg.clear();
    } else if (text[i] == '%') {
      const std::string hex = text.substr(i + 1, 2);
      CRUMB_CHECK(hex.size() == 2 && std::isxdigit(static_cast<unsigned char>(hex[0])) &&
                      std::isxdigit(static_cast<unsigned char>(hex[1])),
                  path, ": damaged \"train.args\" in its metadata");
      arg += static_cast<char>(std::stoi(hex, nullptr, 16));
      i += 2;
    } else {
      arg += text[i];
    }
  }
  if (!arg.empty()) args.push_back(arg);
  return args;
}

namespace {

int explain(const Options& o) {
  ReportOutput report(o.report, o.report_dir);
  const Device device = pick_device(o);
  // The input shape of the dataset the run would read (its files are not opened to plan).
  Graph g = models::build(o.model, planned_spec(o));
  g.set_tf32(o.tf32);
  build_backward(g);
  const StrategyPlan p = pick_micro_batch(o, g, o.batch, device);
  std::cout << o.model << " on " << device_name(device) << ", " << batch_split(o, o.batch, p) << "\n";
  write_strategy_report(std::cout, g, p);
  write_memory_report(std::cout, g, p.plan.memory, p.plan.train.plan, budget_of(o, device));
  if (!o.explain_csv.empty()) {
    std::ofstream f(o.explain_csv);
    CRUMB_CHECK(f, "cannot write ", o.explain_csv);
    write_timeline_csv(f, g, p.plan.train.plan);
    CRUMB_CHECK(f.flush(), "cannot write ", o.explain_csv);
  }
  if (report.wanted()) report.write(report_data(o, g, p, o.batch, device, {}));
  return 0;
}

// PyTorch DDP's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES): small, so the first sum starts early.
constexpr std::size_t kFirstBucketBytes = std::size_t{1} << 20;

// Every rank starts from rank 0's weights and state (its --load or --resume, or its initialisation).
void broadcast_weights(Communicator& comm, ParamStore& params) {
  comm.broadcast_host(params.data_block(), params.bytes());
  const Graph& g = params.graph();
  for (ValueId v : g.states())
    comm.broadcast_host(params.state(v), static_cast<std::size_t>(g.value(v).count(1)) * dtype_size(g.value(v).dtype));
  params.to_device();
}

// Sums the ranks' shares of a batch's loss and accuracy, and whether any rank was asked to stop, so
// that all ranks stop after the same step.
bool sum_over_ranks(Communicator& comm, BatchResult& r, bool stop) {
  double totals[3] = {r.loss_sum, static_cast<double>(r.correct), stop ? 1.0 : 0.0};
  comm.sum_host(totals, 3);
  r.loss_sum = totals[0];
  r.correct = static_cast<int64_t>(totals[1]);
  return totals[2] > 0;
}

// comm: set to the ranks this process was launched among (mpirun), for main() to stop them on an error.
int run(const Options& o, std::unique_ptr<Communicator>& comm) {
  // From the start: a signal while the data loads stops the run after its first step, with a checkpoint.
  catch_interrupts();
  set_num_threads(o.threads);
  if (o.explain) return explain(o);
  // Checked before the data loads, so a bad path fails at once.
  ReportOutput report(o.report, o.report_dir);
  const Device device = pick_device(o);
  comm = connect_ranks(device, o.dist_timeout);
  const int ranks = comm ? comm->size() : 1;
  // Rank 0 alone prints, evaluates and writes files.
  const bool lead = !comm || comm->rank() == 0;
  CRUMB_CHECK(ranks == 1 || o.sweep.empty(), "--sweep measures one process: run it without mpirun");
  const bool cifar = o.dataset == "cifar10", synthetic = o.dataset == "synthetic", npy = o.dataset == "npy";
  const std::string dir = synthetic ? "synthetic data" : o.data.empty() ? data::default_data_dir() : o.data;
  data::Dataset train, test;
  if (synthetic) {
    split_synthetic(o, train, test);
  } else if (npy) {
    data::load_npy_dir(dir, train, test);
  } else {
    train = cifar ? data::load_cifar10_split(dir, "train") : data::load_mnist_split(dir, "train");
    test = cifar ? data::load_cifar10_split(dir, "test") : data::load_mnist_split(dir, "t10k");
  }
  const data::Normalization& norm = cifar       ? data::kCifar10Norm
                                    : synthetic ? data::kSyntheticNorm
                                    : npy       ? data::npy_normalization(train)
                                                : data::kFashionMnistNorm;
  truncate(train, o.limit_train);
  truncate(test, o.limit_test);
  CRUMB_CHECK(test.channels == train.channels && test.height == train.height && test.width == train.width,
              dir, ": test images are ", test.channels, "x", test.height, "x", test.width, " but training images are ",
              train.channels, "x", train.height, "x", train.width);
  // A batch larger than the dataset is the whole dataset: buffers are sized by what can be filled.
  const int batch = std::min(o.batch, train.count);

  Graph g = models::build(o.model, model_spec(o, train.channels, train.height, train.width, train.num_classes));
  g.set_tf32(o.tf32);
  build_backward(g);
  // Each rank plans for the largest share, rank 0's.
  StrategyPlan strategy = pick_micro_batch(o, g, batch_share(batch, ranks, 0).size, device);
  MicroBatchPlan& compiled = strategy.plan;
  const int m = compiled.micro_batch;
  if (!strategy.choice.swapped.empty() || !strategy.choice.recomputed.empty()) {
    std::ostringstream os;
    write_strategy_report(os, g, strategy);
    std::fputs(os.str().c_str(), stderr);
  }
  const Memory batch_memory = device == Device::CPU ? Memory::Host : Memory::Pinned;
  std::vector<Trial> trials;
  if (!o.sweep.empty())
    trials = run_trials(g, sweep_sizes(o, g, batch, device), {&train, norm, batch, o.optimizer, device, o.seed});
  // The plans are moved into the scheduler: the report takes what it draws now.
  std::optional<ReportData> report_plan;
  if (lead && report.wanted()) report_plan = report_data(o, g, strategy, batch, device, o.sweep);
  if (report_plan) report_plan->trials = trials;
  // What the run allocates, without the trials, the program or the dataset.
  const RssGrowth rss;
  ParamStore params(g, device);
  params.init(o.seed);
  // A GPU copies micro-batches straight out of the loader's slots, asynchronously when they are pinned. The
  // loader assembles this rank's share of each batch, a micro-batch at a time.
  data::Loader train_loader(train, batch, norm, /*shuffle=*/true, o.seed, false, batch_memory);
  train_loader.set_micro_batch(m, comm ? comm->rank() : 0, ranks);
  if (o.augment) train_loader.set_augment({4, true});
  // Evaluation runs in chunks of the micro-batch size: a sum over samples needs no batch.
  data::Loader test_loader(test, std::min(m, test.count), norm, /*shuffle=*/false, 0, false,
                           batch_memory);
  // The schedule counts optimizer steps (batches, never micro-batches); cosine anneals to 0 at the end
  // of this run, which continues the step count of a loaded checkpoint.
  const long long run_steps = static_cast<long long>(o.epochs) * train_loader.batches_per_epoch();
  OptimizerConfig opt_cfg = o.optimizer;
  opt_cfg.schedule.total_steps = run_steps;
  const std::unique_ptr<Optimizer> opt = make_optimizer(params, opt_cfg);
  if (!o.load.empty()) {
    load_checkpoint(o.load, params, opt.get());
    // The tensors fit this model exactly (or loading failed); a file recorded for another model name is
    // worth a word, as the weights may mean something else here.
    for (const auto& [key, value] : checkpoint_metadata(o.load))
      if (key == "model" && !value.empty() && value != o.model)
        std::fprintf(stderr, "train: warning: %s was saved from model '%s', loading it into '%s'\n", o.load.c_str(),
                     value.c_str(), o.model.c_str());
  }
  // A resumed run continues the same run: its schedule ends where the uninterrupted one would.
  int start_epoch = 0, start_batch = 0;
  if (!o.resume.empty()) {
    load_checkpoint(o.resume, params, opt.get());
    const CheckpointMetadata meta = checkpoint_metadata(o.resume);
    start_epoch = metadata_int(meta, "train.epoch", o.resume);
    start_batch = metadata_int(meta, "train.batch", o.resume);
    CRUMB_CHECK(start_batch <= train_loader.batches_per_epoch(), o.resume, " stopped at batch ", start_batch,
                " of an epoch, but this data has ", train_loader.batches_per_epoch(), " batches per epoch");
    const int threads = metadata_int(meta, "train.threads", o.resume), saved_m = metadata_int(meta, "train.micro_batch", o.resume);
    if (threads != o.threads || saved_m != m)
      std::fprintf(stderr,
                   "train: warning: the run used %d threads and micro-batches of %d, this one %d and %d: it continues "
                   "exactly, but float rounding will differ from an uninterrupted run\n",
                   threads, saved_m, o.threads, m);
    std::fprintf(stderr, "resuming %s at epoch %d, batch %d (optimizer step %lld)\n", o.resume.c_str(), start_epoch + 1,
                 start_batch + 1, opt->steps());
    opt->set_total_steps(static_cast<long long>(o.epochs) * train_loader.batches_per_epoch());
  } else {
    opt->set_total_steps(opt->steps() + run_steps);
  }
  if (comm) broadcast_weights(*comm, params);
  const long long steps_before = opt->steps();
  // Opened before training, so a bad path fails at once rather than after the first epoch.
  std::unique_ptr<RunLog> log;
  if (lead && !o.log.empty()) log = std::make_unique<RunLog>(o.log);
  if (lead && !o.save.empty()) check_checkpoint_path(o.save);
  Arena arena(device);
  Scheduler sched(g, params, arena, std::move(compiled.train), std::move(compiled.eval));
  sched.set_recording(o.cuda_graphs);
  const MemoryPlan& plan = sched.train_executor().plan();
  std::unique_ptr<GradientReducer> reducer;
  if (comm) {
    reducer = std::make_unique<GradientReducer>(*comm, params, plan.order,
                                                plan_buckets(params, o.bucket_cap, std::min(o.bucket_cap, kFirstBucketBytes)));
    sched.set_data_parallel(reducer.get());
  }
  if (lead && device != Device::CPU) std::fprintf(stderr, "device: %s\n", backend(device).description().c_str());
  if (lead)
    std::fprintf(stderr,
                 "%s on %s: %lld parameters, batch %d in micro-batches of %d, arena %s (training plan %s, lower bound "
                 "%s, ratio %.3f), %d threads\n",
                 o.model.c_str(), device_name(device), static_cast<long long>(params.num_parameters()), batch, m,
                 format_bytes(arena.size()).c_str(), format_bytes(plan.arena_bytes).c_str(),
                 format_bytes(plan.lower_bound).c_str(), plan.ratio(), o.threads);
  if (lead && reducer)
    std::fprintf(stderr, "data parallel: %d ranks, shares of %d to %d samples, gradients summed in %zu buckets\n",
                 ranks, batch_share(batch, ranks, ranks - 1).size, batch_share(batch, ranks, 0).size,
                 reducer->buckets().size());

  double train_seconds = 0, last_loss = 0;
  double batch_seconds = 0;  // in train_batch: forward + backward of every micro-batch, without the optimizer
  long long micro_batches = 0;
  Evaluation test_result;
  long long samples = 0;
  for (int epoch = start_epoch; epoch < o.epochs; ++epoch) {
    Progress progress(epoch + 1, o.epochs, train_loader.batches_per_epoch());
    train_loader.start_epoch(epoch, epoch == start_epoch ? start_batch : 0);
    const Clock::time_point t0 = Clock::now();
    double loss_sum = 0;
    long long epoch_samples = 0;
    data::Batch b;
    while (train_loader.next(b)) {
      const Clock::time_point step_start = Clock::now();
      BatchResult r = sched.train_batch(train_loader, b.size, random_key(o.seed, opt->steps()));
      batch_seconds += seconds_since(step_start);
      micro_batches += r.micro_batches;
      const bool stop = comm ? sum_over_ranks(*comm, r, interrupted() != 0) : interrupted() != 0;
      CRUMB_CHECK(std::isfinite(r.loss_sum), "loss became ", r.loss_sum, " at epoch ", epoch + 1, " batch ",
                  b.index + 1, ": training diverged (lower --lr)");
      check_parameters_finite(*opt, epoch, b.index);
      opt->step();
      loss_sum += r.loss_sum;
      epoch_samples += b.size;
      const double samples_per_s = (samples + epoch_samples) / (train_seconds + seconds_since(t0));
      if (lead) progress.update(b.index + 1, loss_sum / epoch_samples, samples_per_s);
      if (log)
        log->step(opt->steps(), epoch + 1, b.index + 1, r.loss_sum / b.size, opt->lr(opt->steps() - 1), samples_per_s, m,
                  arena.size());
      if (lead && !o.save.empty() && (stop || (o.save_every && opt->steps() % o.save_every == 0))) {
        check_parameters_finite(*opt, epoch, b.index + 1);
        const bool epoch_done = b.index + 1 == train_loader.batches_per_epoch();
        save_or_rescue(o, params, *opt, run_metadata(o, epoch + epoch_done, epoch_done ? 0 : b.index + 1, m));
      }
      if (stop) {
        // Under mpirun a rank may stop because another one was signalled.
        const int signal = interrupted() ? interrupted() : SIGTERM;
        if (!lead) return 128 + signal;
        progress.finish();
        std::fprintf(stderr, "train: interrupted by %s after optimizer step %lld (epoch %d, batch %d of %d); %s\n",
                     signal == SIGINT ? "SIGINT" : "SIGTERM", opt->steps(), epoch + 1, b.index + 1,
                     train_loader.batches_per_epoch(),
                     o.save.empty() ? "nothing was saved (no --save)" : ("saved " + o.save).c_str());
        return 128 + signal;
      }
    }
    check_parameters_finite(*opt, epoch, train_loader.batches_per_epoch());
    if (lead && !o.save.empty() && epoch + 1 < o.epochs) save_or_rescue(o, params, *opt, run_metadata(o, epoch + 1, 0, m));
    train_seconds += seconds_since(t0);
    samples += epoch_samples;
    last_loss = loss_sum / epoch_samples;
    if (!lead) continue;
    progress.finish();
    test_result = evaluate(sched, test_loader, test.count);
    if (log) log->epoch(epoch + 1, last_loss, test_result.loss, test_result.accuracy, seconds_since(t0));
    std::fprintf(stderr, "epoch %d/%d: train loss %.4f, test loss %.4f, test accuracy %.4f, %.0f samples/s\n",
                 epoch + 1, o.epochs, last_loss, test_result.loss, test_result.accuracy, samples / train_seconds);
  }
  if (!lead) return 0;
  if (o.epochs == 0) test_result = evaluate(sched, test_loader, test.count);
  if (!o.save.empty()) save_or_rescue(o, params, *opt, run_metadata(o, o.epochs, 0, m));
  const double samples_per_s = train_seconds > 0 ? samples / train_seconds : 0.0;
  if (report_plan) {
    report_plan->measured = Measured{opt->steps() - steps_before, train_seconds, samples_per_s, rss.peak_bytes(),
                                     max_rss_bytes(), test_result.accuracy};
    report.write(*report_plan);
  }
  // Rank 0's view of the gradient sums: how long they took, and how much of that the backward hid.
  std::string dist;
  if (reducer) {
    const GradientReducer::Timing& t = reducer->timing();
    std::fprintf(stderr,
                 "data parallel: gradient sums took %.3f s over %lld steps, %.3f s of it waiting after the backward "
                 "(%.0f%% hidden)\n",
                 t.span_seconds, t.batches, t.waited_seconds,
                 t.span_seconds > 0 ? 100.0 * (1.0 - t.waited_seconds / t.span_seconds) : 0.0);
    char buf[160];
    std::snprintf(buf, sizeof buf, ",\"ranks\":%d,\"buckets\":%zu,\"allreduce_seconds\":%.4f,\"allreduce_wait_seconds\":%.4f",
                  ranks, reducer->buckets().size(), t.span_seconds, t.waited_seconds);
    dist = buf;
  }
  std::printf(
      "{\"model\":\"%s\",\"dataset\":\"%s\",\"epochs\":%d,\"batch\":%d,\"micro_batch\":%d,\"threads\":%d,\"seed\":%llu,"
      "\"samples_per_s\":%.1f,\"train_seconds\":%.3f,\"test_accuracy\":%.4f,\"test_loss\":%.6f,\"final_loss\":%.6f,"
      "\"parameters\":%lld,\"arena_bytes\":%zu,\"arena_lower_bound\":%zu,\"device\":\"%s\",\"tf32\":%s,"
      "\"cuda_graphs\":%s,\"optimizer\":\"%s\",\"lr_schedule\":\"%s\",\"final_lr\":%.9g,\"memory_budget\":%zu,"
      "\"max_rss_bytes\":%zu,\"strategy\":\"%s\",\"strategy_used\":\"%s\",\"swapped\":%zu,\"recomputed\":%zu,"
      "\"host_pool_bytes\":%zu,\"predicted_step_s\":%.6f,\"in_memory_step_s\":%.6f,\"measured_step_s\":%.6f%s}\n",
      o.model.c_str(), o.dataset.c_str(), o.epochs, batch, m, o.threads, static_cast<unsigned long long>(o.seed), samples_per_s,
      train_seconds, test_result.accuracy, test_result.loss, last_loss, static_cast<long long>(params.num_parameters()), arena.size(),
      plan.lower_bound, device_name(device), o.tf32 && device == Device::CUDA ? "true" : "false",
      sched.train_executor().recording() ? "true" : "false", optimizer_name(opt->kind()),
      lr_schedule_name(o.optimizer.schedule.kind), opt->lr(std::max(opt->steps() - 1, 0LL)), budget_of(o, device),
      max_rss_bytes(), strategy_name(o.strategy), strategy.choice.used.c_str(), strategy.choice.swapped.size(),
      strategy.choice.recomputed.size(), plan.host_pool_bytes, strategy.choice.predicted_seconds,
      strategy.choice.in_memory_seconds, micro_batches ? batch_seconds / micro_batches : 0.0, dist.c_str());
  return 0;
}

}  // namespace
}  // namespace crumb::train

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) then fails the write with EFBIG, reported as one error line, instead
  // of killing the process mid-save.
  std::signal(SIGXFSZ, SIG_IGN);
  crumb::train::Options o;
  std::unique_ptr<crumb::Communicator> comm;  // under mpirun: the other ranks, stopped on an error here
  // The rank that fails says why and stops the others, which would otherwise wait for it.
  auto fail = [&](int code) {
    if (comm) comm->abort(code);
    return code;
  };
  try {
    o = crumb::train::parse_flags(argc, argv);
    if (!o.resume.empty()) o = crumb::train::resume_flags(crumb::train::recorded_args(o.resume), o);
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
  if (o.help) {
    std::fputs(crumb::train::usage(), stdout);
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
