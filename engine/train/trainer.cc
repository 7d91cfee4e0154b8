#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>

#include "engine/base/error.h"
#include "engine/base/threads.h"
#include "engine/data/data_checks.h"
#include "engine/dist/batch_share.h"
#include "engine/dist/rank_agreement.h"
#include "engine/graph/rng.h"
#include "engine/io/json.h"
#include "engine/ops/norm.h"
#include "engine/train/network.h"
#include "engine/train/run_files.h"
#include "engine/train/run_log.h"
#include "engine/train/signals.h"

namespace crumb {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// PyTorch DDP's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES): small, so the first sum starts early.
constexpr std::size_t kFirstBucketBytes = std::size_t{1} << 20;

// What the run writes into JSON (the summary, checkpoint headers) must be UTF-8, which JSON and
// safetensors require: checked before the run starts rather than when its first checkpoint is saved.
void check_utf8(const TrainConfig& c) {
  for (const auto& [key, value] : c.record)
    for (const std::string* text : {&key, &value}) {
      std::size_t bad = 0;
      CRUMB_CHECK(json::valid_utf8(*text, &bad), "the run's record \"", key.substr(0, 64), "\" (kept in checkpoint ",
                  "headers) is not UTF-8 at byte ", bad, " (", text->substr(0, bad), "...): give names and paths in UTF-8");
    }
  std::size_t bad = 0;
  CRUMB_CHECK(json::valid_utf8(c.model, &bad), "the model name is not UTF-8 at byte ", bad, " (", c.model.substr(0, bad),
              "...): give it in UTF-8");
}

// What every rank of a data-parallel run must agree on, one "key=value" item per line: the settings that
// change the result, the model's parameters and the data's shape.
std::string rank_digest(const TrainConfig& c, const Graph& g, const data::Dataset& train) {
  std::string d = result_settings(c) + "\n";
  for (ValueId p : g.params()) d += "parameter " + g.value(p).name + "=" + dims_str(g.value(p).dims) + "\n";
  d += "data=" + std::to_string(train.count) + "x" + std::to_string(train.channels) + "x" + std::to_string(train.height) +
       "x" + std::to_string(train.width) + " classes " + std::to_string(train.num_classes) + "\n";
  return d;
}

struct RankAgreement {
  bool stop;  // some rank was asked to stop: all of them stop after this step
  bool end;   // the run ends after this step on every rank, stopped or at its last batch
};

// Sums the ranks' shares of a batch's loss and accuracy, whether any rank was asked to stop, and how many
// train no further step.
RankAgreement sum_over_ranks(Communicator& comm, BatchResult& r, bool stop, bool last) {
  double totals[4] = {r.loss_sum, static_cast<double>(r.correct), stop ? 1.0 : 0.0, last ? 1.0 : 0.0};
  comm.sum_host(totals, 4);
  r.loss_sum = totals[0];
  r.correct = static_cast<int64_t>(totals[1]);
  return {totals[2] > 0, totals[2] > 0 || totals[3] == comm.size()};
}

// count float32 or float64 values of src into dst from element `at` on, as float32 or float64.
void copy_as(void* dst, DType as, std::size_t at, const void* src, DType from, std::size_t count) {
  auto copy = [&](auto* d) {
    if (from == DType::F64) std::copy_n(static_cast<const double*>(src), count, d + at);
    else std::copy_n(static_cast<const float*>(src), count, d + at);
  };
  if (as == DType::F64) copy(static_cast<double*>(dst));
  else copy(static_cast<float*>(dst));
}

}  // namespace

Trainer::Trainer(TrainConfig cfg, std::shared_ptr<const data::DataSplit> data, std::shared_ptr<Communicator> comm)
    : cfg_(std::move(cfg)), comm_(std::move(comm)), scaler_(cfg_.loss_scale, cfg_.precision == Precision::FP16) {
  build(std::nullopt, std::nullopt, std::move(data));
}

Trainer::Trainer(TrainConfig cfg, Graph model, std::shared_ptr<const data::DataSplit> data,
                 std::shared_ptr<Communicator> comm)
    : cfg_(std::move(cfg)), comm_(std::move(comm)), scaler_(cfg_.loss_scale, cfg_.precision == Precision::FP16) {
  build(std::move(model), std::nullopt, std::move(data));
}

Trainer::Trainer(TrainConfig cfg, RunPlan plan, std::shared_ptr<const data::DataSplit> data,
                 std::shared_ptr<Communicator> comm)
    : cfg_(std::move(cfg)), comm_(std::move(comm)), scaler_(cfg_.loss_scale, cfg_.precision == Precision::FP16) {
  build(std::nullopt, std::move(plan), std::move(data));
}

void Trainer::build(std::optional<Graph> model, std::optional<RunPlan> plan,
                    std::shared_ptr<const data::DataSplit> data) {
  if (model || plan) {
    const char* given = model ? "graph" : "plan";
    CRUMB_CHECK(cfg_.network.empty(), "a Trainer given a ", given, " takes no network description (TrainConfig::network)");
    CRUMB_CHECK(data, "a Trainer given a ", given, " needs its data (the images its input \"x\" takes)");
    cfg_.graph_given = true;
  }
  cfg_.validate();
  // Before any file is read: no output of the run may replace one of its inputs.
  check_run_files(cfg_);
  cfg_.model = model_name(cfg_);
  set_num_threads(cfg_.threads);
  const Device device = pick_device(cfg_);
  if (!comm_) comm_ = connect_ranks(device, cfg_.dist_timeout);
  data_ = data ? std::move(data) : std::make_shared<const data::DataSplit>(data::load_data(cfg_.data));
  const data::Dataset& train = data_->train;
  data::check_split(*data_);
  check_utf8(cfg_);
  // A batch larger than the dataset is the whole dataset: buffers are sized by what can be filled. With
  // no samples yet (a trainer that predicts until train_more), the batch training would use.
  batch_ = train.count > 0 ? std::min(cfg_.batch, train.count) : cfg_.batch;
  // Each rank plans for the largest share, rank 0's, which holds whole BatchNorm groups: the groups one
  // process forms, so that the ranks train what it would.
  named_model_ = !model && !plan && cfg_.network.empty();
  const data::DataShape shape{train.channels, train.height, train.width, train.num_classes};
  const int group = plan ? micro_batch_multiple(plan->graph) : model ? micro_batch_multiple(*model) : share_group(cfg_, shape);
  CRUMB_CHECK(ranks() == 1 || group != 0, "--bn-group batch normalises over the whole batch, which one process holds, "
              "but the run has ", ranks(), " ranks: give --bn-group G (each rank then normalises whole groups of G "
              "samples, the groups one process forms; G = the batch over the ranks keeps each rank's statistics its "
              "own, as PyTorch's DistributedDataParallel without SyncBatchNorm does), or --norm gn");
  share_group_ = group;
  const int share = share_of(batch_, 0).size;
  if (plan) {
    CRUMB_CHECK(plan->device == device, "the plan given to the Trainer is for ", device_name(plan->device),
                " but the run is on ", device_name(device), ": plan it for the run's device (TrainConfig::device)");
    CRUMB_CHECK(plan->batch == share, "the plan given to the Trainer is for batches of ", plan->batch,
                " samples but the run's are ", share, " (per rank): plan it for those");
    const int m = plan->strategy.plan.micro_batch;
    CRUMB_CHECK(cfg_.micro_batch == 0 || cfg_.micro_batch == m, "--micro-batch ", cfg_.micro_batch,
                " but the plan given to the Trainer runs micro-batches of ", m, ": leave it 0 or give the plan's");
    check_bn_group(cfg_, plan->graph, share, false);
    check_micro_batch(plan->graph, m, share);
    plan_ = std::move(*plan);
  } else {
    plan_ = model ? plan_graph(cfg_, std::move(*model), share, device, ranks())
                  : plan_run(cfg_, shape, share, device, ranks());
  }
  CRUMB_CHECK(!plan_.graph.step_in_backward() || (ranks() == 1 && !scaler_.enabled() && plan_.strategy.plan.micro_batch >= share),
              "the plan has the optimizer step in the backward pass, which needs the batch in one micro-batch, one ",
              "process and no fp16 loss scaling (each sees every gradient whole first): plan it for this run");
  if (comm_) check_ranks_agree(*comm_, rank_digest(cfg_, plan_.graph, train));
}

Trainer::~Trainer() = default;

int Trainer::batches_per_epoch() const { return train_loader_->batches_per_epoch(); }

std::size_t Trainer::arena_bytes() const { return arena_->size(); }

void Trainer::prepare() {
  if (sched_) return;
  const Device device = plan_.device;
  params_ = std::make_unique<ParamStore>(plan_.graph, device);
  params_->init(cfg_.seed);
  if (initial_state_) {
    initial_state_(*params_);
    params_->to_device();
    initial_state_ = nullptr;
  }
  make_loaders();
  // The schedule counts optimizer steps (batches, never micro-batches); cosine anneals to 0 at the end
  // of this run, which continues the step count of a loaded checkpoint.
  const long long run_steps = static_cast<long long>(cfg_.epochs) * batches_per_epoch();
  OptimizerConfig opt_cfg = cfg_.optimizer;
  opt_cfg.schedule.total_steps = run_steps;
  opt_ = make_optimizer(*params_, opt_cfg);
  if (!cfg_.load.empty()) {
    load_checkpoint(cfg_.load, *params_, opt_.get());
    // The tensors fit this model exactly (or loading failed); a file recorded for another model name is
    // worth a word, as the weights may mean something else here.
    for (const auto& [key, value] : checkpoint_metadata(cfg_.load))
      if (key == "model" && !value.empty() && value != cfg_.model)
        warnings_.push_back(cfg_.load + " was saved from model '" + value + "', loading it into '" + cfg_.model + "'");
  }
  continue_run(run_steps);
  if (comm_) broadcast_weights(*comm_, *params_);
  if (lead() && !cfg_.save.empty()) check_checkpoint_path(cfg_.save);
  // Opened before training, so a bad path fails at once rather than after the first epoch.
  if (lead() && !cfg_.log.empty())
    log_ = cfg_.resume.empty() ? std::make_unique<RunLog>(cfg_.log, cfg_.log_append)
                               : std::make_unique<RunLog>(cfg_.log, start_epoch_, start_batch_);
  arena_ = std::make_unique<Arena>(device);
  sched_ = std::make_unique<Scheduler>(plan_.graph, *params_, *arena_, std::move(plan_.strategy.plan.train),
                                       std::move(plan_.strategy.plan.eval));
  sched_->set_recording(cfg_.cuda_graphs);
  if (comm_) {
    reducer_ = std::make_unique<GradientReducer>(
        *comm_, *params_, sched_->train_executor().plan().order,
        plan_buckets(*params_, cfg_.bucket_cap, std::min(cfg_.bucket_cap, kFirstBucketBytes)));
    sched_->set_data_parallel(reducer_.get());
  }
  if (plan_.graph.step_in_backward()) {
    step_in_backward_ = std::make_unique<StepInBackward>(*opt_, sched_->train_executor());
    sched_->set_train_observer(step_in_backward_.get());
  }
  epoch_ = epochs_done_ = at_epoch_ = start_epoch_;
  at_batch_ = start_batch_;
}

void Trainer::set_initial_state(std::function<void(ParamStore&)> set) {
  CRUMB_CHECK(!prepared(), "set_initial_state: the parameters are already set (call it before prepare or fit)");
  initial_state_ = std::move(set);
}

void Trainer::make_loaders() {
  const int m = micro_batch();
  // A GPU copies micro-batches straight out of the loader's slots, asynchronously when they are pinned.
  const Memory batch_memory = backend(plan_.device).host_memory();
  train_loader_ = std::make_unique<data::Loader>(
      data_->train, batch_, data_->norm,
      (cfg_.shuffle ? data::LoaderOptions::shuffled(cfg_.seed) : data::LoaderOptions::in_order(cfg_.seed))
          .dropping_last(cfg_.drop_last)
          .in(batch_memory)
          .as(image_dtype()));
  // The loader assembles this rank's share of each batch, a micro-batch at a time.
  train_loader_->set_micro_batch(m, comm_ ? comm_->rank() : 0, ranks(), share_group_);
  if (cfg_.augment) train_loader_->set_augment({4, true});
  // Evaluation runs in chunks of the micro-batch size: a sum over samples needs no batch.
  test_loader_.reset();
  if (data_->test.count)
    test_loader_ = std::make_unique<data::Loader>(data_->test, std::min(m, data_->test.count), data_->norm,
                                                  data::LoaderOptions::in_order().in(batch_memory).as(image_dtype()));
}

DType Trainer::image_dtype() const {
  const ValueId x = plan_.graph.find_value("x");
  CRUMB_CHECK(x >= 0 && plan_.graph.value(x).kind == ValueKind::Input, "the model has no input named 'x' (its images)");
  return plan_.graph.value(x).dtype;
}

void Trainer::check_like_training(const data::Dataset& ds, const char* what) const {
  const data::Dataset& t = data_->train;
  CRUMB_CHECK(ds.channels == t.channels && ds.height == t.height && ds.width == t.width, what, " has images of ",
              ds.channels, "x", ds.height, "x", ds.width, " but the model was planned for ", t.channels, "x", t.height,
              "x", t.width);
  CRUMB_CHECK(ds.num_classes == t.num_classes, what, " has ", ds.num_classes, " classes but the model has ",
              t.num_classes);
}

void Trainer::train_more(std::shared_ptr<const data::DataSplit> data, int epochs) {
  prepare();
  CRUMB_CHECK(epochs >= 1, "epochs must be >= 1, got ", epochs);
  CRUMB_CHECK(data && data->train.count > 0, "no training samples");
  data::check_split(*data);
  check_like_training(data->train, "the training data");
  if (data->test.count) check_like_training(data->test, "the test data");
  const int batch = std::min(cfg_.batch, data->train.count);
  check_bn_group(cfg_, plan_.graph, batch, named_model_);
  check_micro_batch(plan_.graph, micro_batch(), batch);
  data_ = std::move(data);
  batch_ = batch;
  make_loaders();
  // From the last whole epoch: a fit stopped within an epoch starts that epoch again, on this data.
  start_epoch_ = epoch_ = at_epoch_ = epochs_done_;
  start_batch_ = at_batch_ = 0;
  cfg_.epochs = epochs_done_ + epochs;
  opt_->set_total_steps(opt_->steps() + static_cast<long long>(epochs) * batches_per_epoch());
}

void Trainer::start_epoch(int epoch, int first_batch) {
  prepare();
  epoch_ = epoch;
  at_epoch_ = epoch;
  at_batch_ = first_batch;
  train_loader_->start_epoch(epoch, first_batch);
}

// The last optimizer step (the one before batch `batch` of `epoch`, 0-based) left every parameter finite.
// Checked once the next batch has run, when waiting for that step costs nothing: a ReLU maps NaN to 0,
// so a network whose weights went NaN can still report a finite loss.
void Trainer::check_finite(int epoch, int batch) {
  const uint64_t bad = opt_->nonfinite_parameters();
  if (bad == 0) return;
  diverged_ = true;
  fail_nonfinite(data_->train, "training",
                 detail::concat(bad, " parameters became NaN or infinite at optimizer step ", opt_->steps(), " (epoch ",
                                epoch + 1, ", before batch ", batch + 1, "); nothing was saved"),
                 "lower --lr, or add --warmup-steps");
}

void Trainer::fail_nonfinite(const data::Dataset& ds, const char* split, const std::string& what,
                             const char* advice) const {
  // A NaN pixel makes the same symptoms as a learning rate too high: the data is looked at first.
  if (const std::optional<data::NonFinite> bad = data::find_nonfinite(ds, data_->norm))
    CRUMB_FAIL(data::describe_nonfinite(ds, *bad, detail::concat("the ", split, " images of ", data_->source)), "; ",
               what, " because of it");
  CRUMB_FAIL("training diverged: ", what, " (", advice, ")");
}

bool Trainer::train_batch(StepInfo& info) {
  data::Batch b;
  if (!train_loader_->next(b)) return false;
  const Clock::time_point start = Clock::now();
  const double loss_scale = scaler_.scale();
  if (hooks_.before_batch) hooks_.before_batch(*this);
  // Stepping in the backward pass, the weights are neither the last step's nor this one's until it ends.
  stepping_ = step_in_backward_ != nullptr;
  BatchResult r = sched_->train_batch(*train_loader_, b.size, random_key(cfg_.seed, opt_->steps()), loss_scale);
  batch_seconds_ += seconds_since(start);
  micro_batches_ += r.micro_batches;
  const bool stop = interrupted() != 0 || stop_requested_;
  if (comm_) {
    const RankAgreement agreed =
        sum_over_ranks(*comm_, r, stop, epoch_ + 1 >= cfg_.epochs && b.index + 1 == batches_per_epoch());
    stop_requested_ = agreed.stop;
    ranks_end_together_ = agreed.end;
  } else {
    stop_requested_ = stop;
  }
  stop_agreed_ = stop_requested_;
  diverged_ = !std::isfinite(r.loss_sum);
  if (diverged_)
    fail_nonfinite(data_->train, "training",
                   detail::concat("the loss became ", r.loss_sum, " at epoch ", epoch_ + 1, " batch ", b.index + 1),
                   "lower --lr");
  check_finite(epoch_, b.index);
  if (hooks_.before_step) hooks_.before_step(*this, r);
  // Until the step is whole, the weights are neither the last step's nor this one's.
  stepping_ = true;
  // fp16: one check of the whole step's gradient (after the sum over ranks, so every rank decides alike).
  info.skipped = scaler_.enabled() && !scaler_.update(opt_->nonfinite_gradients());
  if (!info.skipped && !step_in_backward_) opt_->step(static_cast<float>(1.0 / loss_scale));
  stepping_ = false;
  const bool epoch_done = b.index + 1 == batches_per_epoch();
  at_epoch_ = epoch_ + epoch_done;
  at_batch_ = epoch_done ? 0 : b.index + 1;
  info.loss_scale = scaler_.scale();
  info.epoch = epoch_;
  info.batch = b.index;
  info.batches = batches_per_epoch();
  info.samples = b.size;
  info.loss = r.loss_sum / b.size;
  info.correct = r.correct;
  info.step = opt_->steps();
  info.lr = opt_->lr(info.skipped ? opt_->steps() : opt_->steps() - 1);  // a skipped step's would-be rate
  return true;
}

Evaluation Trainer::evaluate() {
  prepare();
  CRUMB_CHECK(test_loader_, "there is no test data to evaluate on");
  return evaluate_with(data_->test, *test_loader_);
}

Evaluation Trainer::evaluate(const data::Dataset& ds) {
  prepare();
  CRUMB_CHECK(ds.count > 0, "nothing to evaluate: no samples");
  check_like_training(ds, "the evaluation data");
  data::Loader loader(ds, std::min(micro_batch(), ds.count), data_->norm,
                      data::LoaderOptions::in_order().in(backend(plan_.device).host_memory()).as(image_dtype()));
  return evaluate_with(ds, loader);
}

Evaluation Trainer::evaluate_with(const data::Dataset& ds, data::Loader& loader, const Scheduler::AfterChunk& after) {
  const int count = ds.count;
  loader.start_epoch(0);
  data::Batch b;
  int64_t correct = 0;
  double loss_sum = 0;
  // A signal during a training run ends the evaluation early (fit then stops); anywhere else it has ended
  // the process (engine/train/signals.h).
  int done = 0;
  while (!interrupted() && loader.next(b)) {
    const BatchResult r = sched_->evaluate(loader, b.size, after ? [&](int first, int n) { after(done + first, n); }
                                                                 : Scheduler::AfterChunk());
    done += b.size;
    correct += r.correct;
    loss_sum += r.loss_sum;
  }
  // A ReLU network with NaN weights still classifies (every logit NaN): the loss says it diverged.
  diverged_ = !std::isfinite(loss_sum);
  if (diverged_)
    fail_nonfinite(ds, "evaluation", detail::concat("the test loss is ", loss_sum, " after optimizer step ", opt_->steps()),
                   "lower --lr, or add --warmup-steps");
  return {static_cast<double>(correct) / count, loss_sum / count, count};
}

void Trainer::predict(const data::Dataset& ds, float* logits) { predict_as(ds, logits, DType::F32); }
void Trainer::predict(const data::Dataset& ds, double* logits) { predict_as(ds, logits, DType::F64); }

void Trainer::predict_as(const data::Dataset& ds, void* logits, DType as) {
  prepare();
  CRUMB_CHECK(ds.count > 0, "nothing to predict: no samples");
  check_like_training(ds, "the data to predict");
  const Graph& g = plan_.graph;
  // The loss op's first input: the last layer's output.
  const ValueId out = g.node(g.value(g.loss()).producer).in.at(0);
  const DType dtype = g.value(out).dtype;
  const std::size_t row = static_cast<std::size_t>(g.value(out).count(1));
  CRUMB_CHECK(row == static_cast<std::size_t>(classes()), "the model's output has ", row, " values per sample for ",
              classes(), " classes");
  Backend& device = backend(plan_.device);
  Backend& host = backend(Device::CPU);
  std::vector<unsigned char> chunk;
  std::vector<float> widened;
  data::Loader loader(ds, std::min(micro_batch(), ds.count), data_->norm,
                      data::LoaderOptions::in_order().in(device.host_memory()).as(image_dtype()));
  evaluate_with(ds, loader, [&](int first, int n) {
    const std::size_t count = n * row, at = first * row;
    chunk.resize(count * dtype_size(dtype));
    device.read_back(chunk.data(), sched_->eval_executor().data(out), chunk.size());
    if (dtype == DType::F32 || dtype == DType::F64) {
      copy_as(logits, as, at, chunk.data(), dtype, count);
    } else {  // 16-bit logits, through float32
      widened.resize(count);
      host.convert(widened.data(), DType::F32, chunk.data(), dtype, count);
      copy_as(logits, as, at, widened.data(), DType::F32, count);
    }
  });
}

void Trainer::preprocess(const data::Dataset& ds, float* x) const { preprocess_as(ds, x, DType::F32); }
void Trainer::preprocess(const data::Dataset& ds, double* x) const { preprocess_as(ds, x, DType::F64); }

void Trainer::preprocess_as(const data::Dataset& ds, void* x, DType as) const {
  CRUMB_CHECK(ds.count > 0, "nothing to preprocess: no samples");
  check_like_training(ds, "the data to preprocess");
  const DType dtype = image_dtype();
  const std::size_t sample = ds.sample_size();
  data::Loader loader(ds, std::min(ds.count, 256), data_->norm, data::LoaderOptions::in_order().as(dtype));
  loader.start_epoch(0);
  data::Batch b;
  for (std::size_t at = 0; loader.next(b); at += static_cast<std::size_t>(b.size) * sample)
    copy_as(x, as, at, dtype == DType::F64 ? static_cast<const void*>(b.x64) : b.x, dtype,
            static_cast<std::size_t>(b.size) * sample);
}

FitResult Trainer::fit(const std::vector<Callback*>& given) {
  prepare();
  CRUMB_CHECK(data_->train.count > 0 || cfg_.epochs <= start_epoch_,
              "there are no training samples: give the trainer data (train_more) before fit");
  // A stop asked for (by a callback or another thread) ends this fit only, however it ends.
  struct ClearStop {
    std::atomic<bool>& requested;
    ~ClearStop() { requested = false; }
  } clear_stop{stop_requested_};
  diverged_ = stepping_ = save_failed_ = ranks_end_together_ = false;
  // A failure mid-run (a data file cut short, out of memory, a callback's error) keeps the work done: the
  // last good optimizer step is saved, as a stop saves it, and the error says so. A signal during that
  // save asks for a stop as one during training does, so the save is not cut short.
  StopOnSignal stop_on_signal;
  try {
    return fit_epochs(given, stop_on_signal);
  } catch (const std::bad_alloc&) {
    throw Error("out of host memory (lower --batch, --micro-batch or --memory-budget)" + after_failure());
  } catch (const std::exception& e) {
    const std::string note = after_failure();
    if (note.empty()) throw;
    throw Error(e.what() + note);
  }
}

// A rank that left the run while the lead still saved could be ended by a copy of the stop's signal
// (mpirun forwards it), and mpirun would then end the lead mid-save. Every rank, the lead once it has saved,
// meets in one more sum where they all know that the run ends after the same step (a rank that trains
// fewer epochs than the others leaves at once, and the others' next sum times out as before).
void Trainer::wait_for_last_save() {
  if (!ranks_end_together_) return;
  ranks_end_together_ = false;
  double none = 0;
  comm_->sum_host(&none, 1);
}

FitResult Trainer::fit_epochs(const std::vector<Callback*>& given, StopOnSignal& stop_on_signal) {
  std::vector<Callback*> callbacks = given;
  if (log_) callbacks.push_back(log_.get());
  const bool saving = lead() && !cfg_.save.empty();
  FitResult result;
  const long long steps_before = opt_->steps(), micro_batches_before = micro_batches_;
  const double batch_seconds_before = batch_seconds_;
  if (lead())
    for (Callback* c : callbacks) c->on_fit_begin(*this);
  for (int epoch = start_epoch_; epoch < cfg_.epochs; ++epoch) {
    if (lead())
      for (Callback* c : callbacks) c->on_epoch_begin(*this, epoch);
    // A resumed epoch goes on from its totals so far (continue_run), any other starts from none.
    if (epoch != start_epoch_ || start_batch_ == 0) epoch_so_far_ = {};
    start_epoch(epoch, epoch == start_epoch_ ? start_batch_ : 0);
    const Clock::time_point t0 = Clock::now();
    long long epoch_samples = 0;  // trained by this fit
    StepInfo info;
    while (train_batch(info)) {
      epoch_so_far_.loss_sum += info.loss * info.samples;
      epoch_so_far_.correct += info.correct;
      epoch_so_far_.samples += info.samples;
      epoch_samples += info.samples;
      info.epoch_loss = epoch_so_far_.loss_sum / epoch_so_far_.samples;
      info.samples_per_s = (result.samples + epoch_samples) / (result.train_seconds + seconds_since(t0));
      if (lead())
        for (Callback* c : callbacks) c->on_step(*this, info);
      // One rank alone stops at once; ranks stop together, after the step all of them know of the request.
      const bool stop = ranks() == 1 ? stop_requested_.load() : stop_agreed_;
      if (saving && (stop || (cfg_.save_every && !info.skipped && opt_->steps() % cfg_.save_every == 0))) {
        check_finite(epoch, info.batch + 1);
        const bool epoch_done = info.batch + 1 == info.batches;
        save_at(epoch + epoch_done, epoch_done ? 0 : info.batch + 1);
        if (stop) stop_on_signal.saved();
      }
      if (stop) {
        wait_for_last_save();
        result.stopped = true;
        break;
      }
    }
    if (result.stopped) {
      result.train_seconds += seconds_since(t0);
      result.samples += epoch_samples;
      break;
    }
    check_finite(epoch, batches_per_epoch());
    epochs_done_ = epoch + 1;
    // Before the evaluation, which a signal may cut short.
    if (saving) save_at(epoch + 1, 0);
    if (epoch + 1 == cfg_.epochs) wait_for_last_save();
    result.train_seconds += seconds_since(t0);
    result.samples += epoch_samples;
    // An epoch resumed at its end trains no batch: its loss is not a number, not 0/0.
    const EpochSoFar whole = epoch_so_far_;
    epoch_so_far_ = {};
    if (whole.samples) result.last_loss = whole.loss_sum / whole.samples;
    if (!lead()) continue;
    EpochInfo e;
    e.epoch = epoch;
    e.train_loss = result.last_loss;
    e.train_accuracy = whole.samples ? static_cast<double>(whole.correct) / whole.samples : 0.0;
    if (test_loader_) e.test = evaluate();
    // A signal during the evaluation cut it short: its figures are not the test set's. The epoch is saved.
    // One rank stops here; the lead of several (the only one that evaluates) reports no test figures and
    // stops with the others after the next step, which every rank agrees on, or here after the last epoch.
    if (interrupted()) {
      if (ranks() == 1 || epoch + 1 == cfg_.epochs) {
        result.stopped = true;
        break;
      }
      e.test = Evaluation{};
    }
    result.test = e.test;
    e.seconds = seconds_since(t0);
    e.samples_per_s = result.samples / result.train_seconds;
    for (Callback* c : callbacks) c->on_epoch_end(*this, e);
    // A stop asked for at the epoch's end (early stopping) ends the run here, its epoch saved; with
    // several ranks it ends after the next step, which every rank agrees on.
    if (ranks() == 1 && stop_requested_ && epoch + 1 < cfg_.epochs) {
      result.stopped = true;
      break;
    }
  }
  // No epoch to train (--epochs 0): evaluate the loaded weights, and save them where asked.
  if (lead() && cfg_.epochs <= start_epoch_ && test_loader_) {
    const Evaluation e = evaluate();
    if (interrupted())
      result.stopped = true;  // cut short: no figures
    else
      result.test = e;
    if (saving) save_at(cfg_.epochs, 0);
  }
  // Under mpirun a rank may stop because another one was signalled: then it saw no signal itself.
  if (result.stopped) result.signal = interrupted();
  result.steps = opt_->steps() - steps_before;
  result.micro_batches = micro_batches_ - micro_batches_before;
  result.batch_seconds = batch_seconds_ - batch_seconds_before;
  if (lead())
    for (Callback* c : callbacks) c->on_fit_end(*this, result.stopped, result.signal);
  return result;
}

}  // namespace crumb
