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
#include "engine/graph/autograd.h"
#include "engine/graph/fusion.h"
#include "engine/graph/rng.h"
#include "engine/io/json.h"
#include "engine/ops/norm.h"
#include "engine/plan/layout.h"
#include "engine/strategy/in_place.h"
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

// A BatchNorm group must fit in the batch it normalises.
void check_bn_group(const TrainConfig& c, const Graph& g, int batch) {
  if (c.network.empty()) {
    CRUMB_CHECK(!models::has_norm(c.model) || c.norm.kind != models::NormSpec::Kind::Batch || c.norm.bn.group <= batch,
                "--bn-group ", c.norm.bn.group, " is larger than the batch of ", batch,
                " samples (use a smaller --bn-group, --bn-group batch, or a larger --batch)");
    return;
  }
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    const BatchNormAttrs* bn = batch_norm_attrs(n);
    if (!bn || bn->frozen) continue;
    const int group = bn->group;
    CRUMB_CHECK(group <= batch, "layer '", n.name, "' normalises groups of ", group, " samples, more than the batch of ",
                batch, " (use a larger --batch, or a smaller group: its \"group\", or --bn-group where it gives none)");
  }
}

std::string describe_split(const TrainConfig& c, int batch, const StrategyPlan& p, bool in_place) {
  const int m = p.plan.micro_batch;
  const std::string how = c.micro_batch                      ? " (--micro-batch"
                          : p.choice.used == "micro-batch"    ? " (largest that fits the budget"
                          : c.strategy == Strategy::None      ? " (--strategy none"
                          : c.strategy == Strategy::Auto      ? " (the smallest allowed does not fit in memory"
                                                              : " (largest that fits with --strategy " +
                                                                    std::string(strategy_name(c.strategy));
  const bool rewritten = !p.choice.swapped.empty() || !p.choice.recomputed.empty();
  return "batch " + std::to_string(batch) + " in " + std::to_string((batch + m - 1) / m) + " micro-batch(es) of " +
         std::to_string(m) + how + (rewritten ? "; " + p.choice.used + " to fit" : "") +
         (in_place ? "; fused normalisations keep their inputs alone, In-Place" : "") + ")";
}

// Micro-batching alone (in memory) for g under r, if it meets the budget.
std::optional<StrategyPlan> in_memory_plan(Graph& g, StrategyRequest r) {
  if (r.strategy == Strategy::Auto) r.strategy = Strategy::MicroBatch;
  try {
    return plan_strategy(g, r);
  } catch (const Error&) {
    return std::nullopt;
  }
}

// In-Place memory (engine/strategy/in_place.h) is the first technique a fused plan tries, before swapping
// and recomputing: it costs a pass over each fused normalisation's output in the backward pass, so it is
// taken where micro-batching alone fits a larger micro-batch with it, or fits only with it. Plans p (its
// graph, fused) in memory and returns true where micro-batching alone meets the budget, In-Place or not;
// false leaves p.graph as it was, for swapping and recomputing, and sets *in_place_total to what
// micro-batching alone needs In-Place at the smallest micro-batch allowed (or the one forced).
bool plan_in_place(RunPlan& p, const StrategyRequest& r, std::size_t* in_place_total) {
  if (r.strategy == Strategy::Swap || r.strategy == Strategy::Recompute) return false;
  Graph kept = p.graph;
  std::optional<StrategyPlan> fast = in_memory_plan(kept, r);
  if (fast && (r.micro_batch > 0 || fast->plan.micro_batch >= r.batch)) {
    p.graph = std::move(kept);
    p.strategy = std::move(*fast);
    return true;
  }
  Graph lean = p.graph;
  recompute_in_place(lean);
  std::optional<StrategyPlan> small = in_memory_plan(lean, r);
  if (small && (!fast || small->plan.micro_batch > fast->plan.micro_batch)) {
    p.graph = std::move(lean);
    p.strategy = std::move(*small);
    p.in_place = true;
    return true;
  }
  if (!fast) {
    const int multiple = micro_batch_multiple(lean);
    const int m = r.micro_batch > 0 ? r.micro_batch : multiple == 0 ? r.batch : std::min(multiple, r.batch);
    MicroBatchPlan least = plan_micro_batch(lean, m, r.optimizer, r.device, r.index);
    count_loader(lean, r.batch, least);
    *in_place_total = least.memory.total();
    return false;
  }
  p.graph = std::move(kept);
  p.strategy = std::move(*fast);
  return true;
}

int metadata_int(const CheckpointMetadata& meta, const std::string& key, const std::string& path) {
  const std::string v = recorded_value(meta, key, path);
  CRUMB_CHECK(!v.empty() && v.size() <= 9 && v.find_first_not_of("0123456789") == std::string::npos, path, ": \"",
              key, "\" is \"", v, "\", not a count");
  return std::stoi(v);
}

// Exact decimal text of floats, comma-separated (what the data keys of a checkpoint record).
std::string floats_text(const std::vector<float>& v) {
  std::string out;
  char buf[32];
  for (float f : v) {
    std::snprintf(buf, sizeof buf, "%.9g", f);
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  return out;
}

// Every rank starts from rank 0's weights and state (its load or resume, or its initialisation).
void broadcast_weights(Communicator& comm, ParamStore& params) {
  comm.broadcast_host(params.data_block(), params.bytes());
  const Graph& g = params.graph();
  for (ValueId v : g.states())
    comm.broadcast_host(params.state(v), static_cast<std::size_t>(g.value(v).count(1)) * dtype_size(g.value(v).dtype));
  params.to_device();
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

// The first item where two digests differ, as "<this> where rank 0 has <that>".
std::string first_difference(const std::string& mine, const std::string& lead) {
  std::size_t i = 0;
  while (i < mine.size() && i < lead.size() && mine[i] == lead[i]) ++i;
  auto item = [&](const std::string& d) {
    // The JSON field or line around the first differing character.
    const std::size_t from = d.find_last_of(",{\n", i == 0 ? 0 : i - 1);
    const std::size_t to = d.find_first_of(",}\n", i);
    return d.substr(from == std::string::npos ? 0 : from + 1, to == std::string::npos ? std::string::npos : to - from - 1);
  };
  return item(mine) + " where rank 0 has " + item(lead);
}

// Every rank compares what it was started with against rank 0's before the first collective that depends on
// it: a mismatch is one error on every rank (and a clean exit), never a crash or runs that drift apart.
void check_ranks_agree(Communicator& comm, const std::string& digest) {
  double size = static_cast<double>(digest.size());
  comm.broadcast_host(&size, sizeof size);
  std::string lead(static_cast<std::size_t>(size), '\0');
  if (comm.rank() == 0) lead = digest;
  comm.broadcast_host(lead.data(), lead.size());
  double differ = lead != digest ? 1 : 0;
  comm.sum_host(&differ, 1);
  if (differ == 0) return;
  comm.fail_together();
  CRUMB_CHECK(lead == digest, "rank ", comm.rank(), " of ", comm.size(), " was started with other settings than rank 0: ",
              first_difference(digest, lead), " (every rank must be given the same flags and data)");
  CRUMB_FAIL(static_cast<int>(differ), " of ", comm.size(), " ranks were started with other settings than rank 0 ",
             "(every rank must be given the same flags and data; each says what differs)");
}

// Sums the ranks' shares of a batch's loss and accuracy, and whether any rank was asked to stop, so that
// all ranks stop after the same step.
bool sum_over_ranks(Communicator& comm, BatchResult& r, bool stop) {
  double totals[3] = {r.loss_sum, static_cast<double>(r.correct), stop ? 1.0 : 0.0};
  comm.sum_host(totals, 3);
  r.loss_sum = totals[0];
  r.correct = static_cast<int64_t>(totals[1]);
  return totals[2] > 0;
}

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
    default: return "fp32";
  }
}

bool precision_named(const std::string& name, Precision& out) {
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16})
    if (name == precision_name(p)) {
      out = p;
      return true;
    }
  return false;
}

OptimizerConfig default_optimizer(OptimizerKind kind) {
  OptimizerConfig c;
  c.kind = kind;
  c.lr = kind == OptimizerKind::Sgd ? 0.05 : 1e-3;
  c.weight_decay = kind == OptimizerKind::Sgd ? 0.0 : 0.01;
  c.momentum = kind == OptimizerKind::Sgd ? 0.9 : 0.0;
  return c;
}

DType activation_dtype(Precision p) {
  return p == Precision::BF16 ? DType::BF16 : p == Precision::FP16 ? DType::F16 : DType::F32;
}

std::string recorded_value(const CheckpointMetadata& meta, const std::string& key, const std::string& path) {
  for (const auto& [k, v] : meta)
    if (k == key) return v;
  CRUMB_FAIL(path, " records no run (no \"", key, "\" in its metadata): it was not saved by train --save; use --load ",
             path, " to start a new run from its weights");
}

std::string model_name(const TrainConfig& c) {
  return c.network.empty() ? c.model : parse_network(c.network, "the network description").name;
}

Device pick_device(const TrainConfig& c) {
  if (!c.device) return preferred_device();
  backend(*c.device);
  return *c.device;
}

std::size_t budget_of(const TrainConfig& c, Device device) {
  return c.memory_budget ? c.memory_budget : backend(device).default_budget();
}

bool uses_channels_last(const TrainConfig& c, Device device) {
  if (c.channels_last != ChannelsLast::Auto) return c.channels_last == ChannelsLast::On;
  return device == Device::CUDA && is_half(activation_dtype(c.precision));
}

namespace {

// The training graph of c (forward, backward, fused and laid out as the run does), checked against the batch.
Graph training_graph(const TrainConfig& c, const data::DataShape& shape, int batch, Device device) {
  if (c.precision == Precision::FP16) c.loss_scale.validate();
  const std::vector<DType> runs = backend(device).float_dtypes();
  CRUMB_CHECK(std::find(runs.begin(), runs.end(), activation_dtype(c.precision)) != runs.end(), "--precision ",
              precision_name(c.precision), ": ", backend(device).description(), " has no ",
              dtype_name(activation_dtype(c.precision)), " arithmetic (bf16 needs compute capability 8.0 or newer); ",
              "use --precision fp16");
  const models::ModelSpec spec(shape.channels, shape.height, shape.width, shape.classes, c.norm, c.dropout);
  Graph g = c.network.empty() ? models::build(c.model, spec, activation_dtype(c.precision))
                              : build_network(c.network, spec, activation_dtype(c.precision));
  g.set_tf32(c.precision == Precision::TF32);
  g.set_deterministic(c.deterministic);
  build_backward(g);
  if (c.fuse) fuse(g);
  if (uses_channels_last(c, device)) to_channels_last(g);
  check_bn_group(c, g, batch);
  return g;
}

}  // namespace

Frontier plan_frontier(const TrainConfig& c, const data::DataShape& shape, int batch, Device device, int micro_batch) {
  const Graph g = training_graph(c, shape, batch, device);
  StrategyRequest r;
  r.strategy = c.strategy;
  r.batch = batch;
  r.budget = budget_of(c, device);
  r.micro_batch = micro_batch;
  r.optimizer = c.optimizer;
  r.device = device;
  return memory_frontier(g, r);
}

RunPlan plan_run(const TrainConfig& c, const data::DataShape& shape, int batch, Device device) {
  RunPlan p;
  p.graph = training_graph(c, shape, batch, device);
  p.device = device;
  p.budget = budget_of(c, device);
  p.batch = batch;
  StrategyRequest r;
  r.strategy = c.strategy;
  r.batch = batch;
  r.budget = p.budget;
  r.micro_batch = c.micro_batch;
  r.optimizer = c.optimizer;
  r.device = device;
  std::size_t in_place_total = 0;
  if (!(c.fuse && plan_in_place(p, r, &in_place_total))) {
    try {
      p.strategy = plan_strategy(p.graph, r);
    } catch (const Error& e) {
      if (!in_place_total) throw;
      CRUMB_FAIL(e.what(), "; in memory with the fused normalisations keeping their inputs alone (In-Place) it needs ",
                 format_bytes(in_place_total));
    }
  }
  p.split = describe_split(c, batch, p.strategy, p.in_place);
  return p;
}

Trainer::Trainer(TrainConfig cfg, std::shared_ptr<const data::DataSplit> data, std::shared_ptr<Communicator> comm)
    : cfg_(std::move(cfg)), comm_(std::move(comm)), scaler_(cfg_.loss_scale, cfg_.precision == Precision::FP16) {
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
  // Each rank plans for the largest share, rank 0's.
  plan_ = plan_run(cfg_, {train.channels, train.height, train.width, train.num_classes},
                   batch_share(batch_, ranks(), 0).size, device);
  if (comm_) check_ranks_agree(*comm_, rank_digest(cfg_, plan_.graph, train));
}

Trainer::~Trainer() = default;

int Trainer::batches_per_epoch() const { return train_loader_->batches_per_epoch(); }

std::size_t Trainer::arena_bytes() const { return arena_->size(); }

void Trainer::prepare() {
  if (sched_) return;
  const Device device = plan_.device;
  const int m = micro_batch();
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
  // A resumed run continues the same run: its schedule ends where the uninterrupted one would.
  if (!cfg_.resume.empty()) {
    // Everything is checked before anything is loaded or written: a resume that cannot continue the run
    // leaves its checkpoint as it was.
    const CheckpointMetadata meta = checkpoint_metadata(cfg_.resume);
    start_epoch_ = metadata_int(meta, "train.epoch", cfg_.resume);
    start_batch_ = metadata_int(meta, "train.batch", cfg_.resume);
    const bool finished = start_batch_ == 0 && start_epoch_ == cfg_.epochs;
    CRUMB_CHECK(!finished, cfg_.resume, " finished its ", start_epoch_,
                " epoch(s): give --epochs above that to train on (the checkpoint is unchanged)");
    CRUMB_CHECK(cfg_.epochs > start_epoch_, cfg_.resume, " has trained ", start_epoch_, " epoch(s)",
                start_batch_ ? " and " + std::to_string(start_batch_) + " batch(es)" : std::string(), ": --epochs ",
                cfg_.epochs, " would move it backwards; give --epochs above ", start_epoch_,
                " (the checkpoint is unchanged)");
    CRUMB_CHECK(has_optimizer_file(cfg_.resume) || cfg_.fresh_optimizer, optimizer_path(cfg_.resume),
                " is missing: it holds the run's optimizer state and step count, without which the momentum and ",
                "the learning-rate schedule would start over; put it back, or pass --fresh-optimizer to resume ",
                "with a new optimizer");
    load_checkpoint(cfg_.resume, *params_, cfg_.fresh_optimizer ? nullptr : opt_.get());
    if (scaler_.enabled())
      scaler_.restore(std::ldexp(1.0, metadata_int(meta, "train.loss_scale_exponent", cfg_.resume)),
                      metadata_int(meta, "train.loss_scale_clean_steps", cfg_.resume),
                      metadata_int(meta, "train.skipped_steps", cfg_.resume));
    CRUMB_CHECK(start_batch_ <= batches_per_epoch() || data_->train.count == 0, cfg_.resume, " stopped at batch ", start_batch_,
                " of an epoch, but this data has ", batches_per_epoch(), " batches per epoch");
    const int threads = metadata_int(meta, "train.threads", cfg_.resume);
    const int saved_m = metadata_int(meta, "train.micro_batch", cfg_.resume);
    if (threads != cfg_.threads || saved_m != m)
      warnings_.push_back("the run used " + std::to_string(threads) + " threads and micro-batches of " +
                          std::to_string(saved_m) + ", this one " + std::to_string(cfg_.threads) + " and " +
                          std::to_string(m) +
                          ": it continues exactly, but float rounding will differ from an uninterrupted run");
    opt_->set_total_steps(run_steps);
  } else {
    opt_->set_total_steps(opt_->steps() + run_steps);
  }
  if (comm_) broadcast_weights(*comm_, *params_);
  if (lead() && !cfg_.save.empty()) check_checkpoint_path(cfg_.save);
  // Opened before training, so a bad path fails at once rather than after the first epoch.
  if (lead() && !cfg_.log.empty()) log_ = std::make_unique<RunLog>(cfg_.log, !cfg_.resume.empty());
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
  train_loader_ = std::make_unique<data::Loader>(data_->train, batch_, data_->norm, /*shuffle=*/true, cfg_.seed,
                                                 cfg_.drop_last, batch_memory);
  // The loader assembles this rank's share of each batch, a micro-batch at a time.
  train_loader_->set_micro_batch(m, comm_ ? comm_->rank() : 0, ranks());
  if (cfg_.augment) train_loader_->set_augment({4, true});
  // Evaluation runs in chunks of the micro-batch size: a sum over samples needs no batch.
  test_loader_.reset();
  if (data_->test.count)
    test_loader_ = std::make_unique<data::Loader>(data_->test, std::min(m, data_->test.count), data_->norm,
                                                  /*shuffle=*/false, 0, false, batch_memory);
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
  check_bn_group(cfg_, plan_.graph, batch);
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
  BatchResult r = sched_->train_batch(*train_loader_, b.size, random_key(cfg_.seed, opt_->steps()), loss_scale);
  batch_seconds_ += seconds_since(start);
  micro_batches_ += r.micro_batches;
  const bool stop = interrupted() != 0 || stop_requested_;
  stop_requested_ = comm_ ? sum_over_ranks(*comm_, r, stop) : stop;
  stop_agreed_ = stop_requested_;
  diverged_ = !std::isfinite(r.loss_sum);
  if (diverged_)
    fail_nonfinite(data_->train, "training",
                   detail::concat("the loss became ", r.loss_sum, " at epoch ", epoch_ + 1, " batch ", b.index + 1),
                   "lower --lr");
  check_finite(epoch_, b.index);
  // Until the step is whole, the weights are neither the last step's nor this one's.
  stepping_ = true;
  // fp16: one check of the whole step's gradient (after the sum over ranks, so every rank decides alike).
  info.skipped = scaler_.enabled() && !scaler_.update(opt_->nonfinite_gradients());
  if (!info.skipped) opt_->step(static_cast<float>(1.0 / loss_scale));
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
  data::Loader loader(ds, std::min(micro_batch(), ds.count), data_->norm, /*shuffle=*/false, 0, false,
                      backend(plan_.device).host_memory());
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

void Trainer::predict(const data::Dataset& ds, float* logits) {
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
  data::Loader loader(ds, std::min(micro_batch(), ds.count), data_->norm, /*shuffle=*/false, 0, false,
                      device.host_memory());
  evaluate_with(ds, loader, [&](int first, int n) {
    const std::size_t count = n * row;
    chunk.resize(count * dtype_size(dtype));
    device.read_back(chunk.data(), sched_->eval_executor().data(out), chunk.size());
    float* dst = logits + first * row;
    if (dtype == DType::F64)  // the float64 graphs of the gradient checks
      std::copy_n(reinterpret_cast<const double*>(chunk.data()), count, dst);
    else if (dtype == DType::F32)
      std::memcpy(dst, chunk.data(), chunk.size());
    else
      host.convert(dst, DType::F32, chunk.data(), dtype, count);
  });
}

void Trainer::save(int epoch, int batch, const std::string& path) {
  const std::string target = path.empty() ? cfg_.save : path;
  CheckpointMetadata meta = cfg_.record;
  meta.insert(meta.end(), {{"train.epoch", std::to_string(epoch)},
                           {"train.batch", std::to_string(batch)},
                           {"train.threads", std::to_string(cfg_.threads)},
                           {"train.micro_batch", std::to_string(micro_batch())}});
  if (scaler_.enabled()) {
    // The scale is a power of two: its exponent is a count, read back as strictly as the others.
    int exponent = 0;
    std::frexp(scaler_.scale(), &exponent);
    meta.insert(meta.end(), {{"train.loss_scale_exponent", std::to_string(exponent - 1)},
                             {"train.loss_scale_clean_steps", std::to_string(scaler_.clean_steps())},
                             {"train.skipped_steps", std::to_string(scaler_.skipped())}});
  }
  if (!cfg_.network.empty())
    meta.push_back({"train.network", network_json(parse_network(cfg_.network, "the network description"))});
  const data::Dataset& t = data_->train;
  meta.insert(meta.end(),
              {{kDataShapeKey, std::to_string(t.channels) + "x" + std::to_string(t.height) + "x" + std::to_string(t.width)},
               {kDataClassesKey, std::to_string(t.num_classes)},
               {kDataPixelsKey, t.pixel_type() == data::PixelType::F32 ? "float32" : "uint8"},
               {kDataMeanKey, floats_text(data_->norm.mean)},
               {kDataStdKey, floats_text(data_->norm.std)}});
  try {
    save_checkpoint_or_rescue(target, *params_, opt_.get(), cfg_.model, meta);
  } catch (...) {
    save_failed_ = true;
    throw;
  }
  if (target == cfg_.save) {
    saved_epoch_ = epoch;
    saved_batch_ = batch;
  }
}

std::string Trainer::after_failure() {
  // A divergence says itself that nothing was saved; a failed save where the weights went.
  if (!lead() || diverged_ || save_failed_) return "";
  if (stepping_)
    return "; nothing was saved: the failure came during an optimizer step, so the weights are not a step's";
  if (cfg_.save.empty()) return "; nothing was saved (no --save)";
  const std::string step = "the last optimizer step (" + std::to_string(opt_->steps()) + ")";
  if (saved_epoch_ == at_epoch_ && saved_batch_ == at_batch_)
    return "; " + cfg_.save + " holds " + step + ": --resume " + cfg_.save + " continues the run";
  try {
    save(at_epoch_, at_batch_);
  } catch (const Error& e) {
    return std::string("; saving ") + step + " failed: " + e.what();
  }
  return "; saved " + step + " in " + cfg_.save + ": --resume " + cfg_.save + " continues the run";
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
  diverged_ = stepping_ = save_failed_ = false;
  // A failure mid-run (a data file cut short, out of memory, a callback's error) keeps the work done: the
  // last good optimizer step is saved, as a stop saves it, and the error says so.
  try {
    return fit_epochs(given);
  } catch (const std::bad_alloc&) {
    throw Error("out of host memory (lower --batch, --micro-batch or --memory-budget)" + after_failure());
  } catch (const std::exception& e) {
    const std::string note = after_failure();
    if (note.empty()) throw;
    throw Error(e.what() + note);
  }
}

FitResult Trainer::fit_epochs(const std::vector<Callback*>& given) {
  std::vector<Callback*> callbacks = given;
  if (log_) callbacks.push_back(log_.get());
  StopOnSignal stop_on_signal;
  const bool saving = lead() && !cfg_.save.empty();
  FitResult result;
  const long long steps_before = opt_->steps(), micro_batches_before = micro_batches_;
  const double batch_seconds_before = batch_seconds_;
  if (lead())
    for (Callback* c : callbacks) c->on_fit_begin(*this);
  for (int epoch = start_epoch_; epoch < cfg_.epochs; ++epoch) {
    if (lead())
      for (Callback* c : callbacks) c->on_epoch_begin(*this, epoch);
    start_epoch(epoch, epoch == start_epoch_ ? start_batch_ : 0);
    const Clock::time_point t0 = Clock::now();
    double loss_sum = 0;
    long long epoch_samples = 0, epoch_correct = 0;
    StepInfo info;
    while (train_batch(info)) {
      loss_sum += info.loss * info.samples;
      epoch_correct += info.correct;
      epoch_samples += info.samples;
      info.epoch_loss = loss_sum / epoch_samples;
      info.samples_per_s = (result.samples + epoch_samples) / (result.train_seconds + seconds_since(t0));
      if (lead())
        for (Callback* c : callbacks) c->on_step(*this, info);
      // One rank alone stops at once; ranks stop together, after the step all of them know of the request.
      const bool stop = ranks() == 1 ? stop_requested_.load() : stop_agreed_;
      if (saving && (stop || (cfg_.save_every && !info.skipped && opt_->steps() % cfg_.save_every == 0))) {
        check_finite(epoch, info.batch + 1);
        const bool epoch_done = info.batch + 1 == info.batches;
        save(epoch + epoch_done, epoch_done ? 0 : info.batch + 1);
        if (stop) stop_on_signal.saved();
      }
      if (stop) {
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
    if (saving) save(epoch + 1, 0);
    result.train_seconds += seconds_since(t0);
    result.samples += epoch_samples;
    // An epoch resumed at its end trains no batch: its loss is not a number, not 0/0.
    if (epoch_samples) result.last_loss = loss_sum / epoch_samples;
    if (!lead()) continue;
    EpochInfo e;
    e.epoch = epoch;
    e.train_loss = result.last_loss;
    e.train_accuracy = epoch_samples ? static_cast<double>(epoch_correct) / epoch_samples : 0.0;
    if (test_loader_) e.test = evaluate();
    if (ranks() == 1 && interrupted()) {  // the evaluation stopped early; the epoch is saved
      result.stopped = true;
      break;
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
    result.test = evaluate();
    if (saving) save(cfg_.epochs, 0);
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
