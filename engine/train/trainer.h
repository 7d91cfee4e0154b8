// A training run assembled in one place: the data, the model, its memory plan for the budget, the
// parameters, the optimizer and its schedule, the scheduler, checkpoints and data parallelism. train, the
// benchmarks, the tests and the examples drive it; none of them holds engine logic.
//
//   TrainConfig cfg;               // model, data, optimizer, schedule, budget, checkpoints, ranks
//   cfg.model = "lenet5";
//   Trainer t(cfg);                // reads the data, builds and plans the model (no allocation yet)
//   Progress progress;             // callbacks: progress on stderr, a JSONL log, your own
//   FitResult r = t.fit({&progress});
//
// fit() runs epochs of batches (as ggml-opt's fit over epochs); train_batch() is one optimizer step, for
// callers that drive the loop themselves. Between batches fit checks that the run has not diverged,
// saves on the checkpoint policy, and stops at a signal (engine/train/signals.h) or at a callback's
// request, after the optimizer step in progress and a save: no work is lost.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/base/tensor.h"
#include "engine/data/loader.h"
#include "engine/data/source.h"
#include "engine/dist/communicator.h"
#include "engine/dist/grad_reducer.h"
#include "engine/io/checkpoint.h"
#include "engine/io/output_file.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/step_in_backward.h"
#include "engine/run/params.h"
#include "engine/strategy/memory_strategy.h"
#include "engine/train/model_registry.h"
#include "engine/train/scheduler.h"

namespace crumb {

// The arithmetic of a run (docs/precision.md): float32; float32 whose products may round to TF32 (CUDA
// tensor cores); mixed precision, with 16-bit activations, float32 master weights, gradients and
// optimizer state (bf16, or fp16 with a dynamic loss scale, engine/optim/loss_scaler.h); or float64
// throughout (fp64: inputs, activations, weights, gradients, optimizer state and checkpoints), a reference
// mode on the CPU only, for comparing with another engine's float64 run digit for digit.
enum class Precision : uint8_t { FP32, TF32, BF16, FP16, FP64 };
const char* precision_name(Precision p);  // "fp32" | "tf32" | "bf16" | "fp16" | "fp64"
bool precision_named(const std::string& name, Precision& out);
// The float dtype of its graphs' activations (Graph::float_dtype).
DType activation_dtype(Precision p);
// fp64 runs on the CPU only: an error naming the device otherwise.
void check_precision_device(Precision p, Device device);

// Whether image layers run channels-last (NHWC, engine/plan/layout.h). Auto: on for bf16 and fp16 on
// CUDA, where cuDNN's tensor-core convolutions want NHWC; off elsewhere (the CPU computes the same
// numbers either way, through transposed copies).
enum class ChannelsLast : uint8_t { Auto, On, Off };

// The optimizers' defaults in a run: SGD at lr 0.05 with momentum 0.9; AdamW with PyTorch's (lr 1e-3, weight
// decay 0.01).
OptimizerConfig default_optimizer(OptimizerKind kind);

class RunLog;
class StopOnSignal;

// A run's whole description. Its options (engine/train/options.h) fill it: train's flags and the Python
// module's keyword arguments; a C++ program sets its fields. The defaults are train's.
struct TrainConfig {
  // The model: a registered name (engine/train/model_registry.h), its normalisation and dropout.
  std::string model = "lenet5";
  // Or a network of the user's: its JSON description (engine/train/network.h). When set it replaces
  // `model`, which the Trainer sets to the network's name; BatchNorm nodes take `norm.bn` unless they give
  // their own group; `dropout` does not apply (each dropout node has its own p). Checkpoints record it
  // ("train.network", canonical), so a resumed run needs no file.
  std::string network;
  // Set by the Trainer given the caller's graph: `model` is then only its name, and the model's options
  // (norm, dropout) do not apply.
  bool graph_given = false;
  models::NormSpec norm;
  double dropout = 0.5;
  data::DataSpec data;
  bool augment = false;  // random crop (pad 4) and horizontal flip of training images
  int epochs = 1;
  int batch = 64;        // a batch larger than the training set is the whole set
  int micro_batch = 0;   // 0: the budget decides (the `micro-batch` row of engine/train/options.cc says how)
  bool drop_last = false;  // skip each epoch's short last batch
  // Each epoch's samples in a fresh order drawn from (seed, epoch), as PyTorch's DataLoader(shuffle=True);
  // false keeps the data's own order in every epoch (shuffle=False).
  bool shuffle = true;
  OptimizerConfig optimizer = default_optimizer(OptimizerKind::Sgd);  // its schedule's horizon is set by the run
  std::optional<Device> device;  // none: CUDA where a GPU is usable (and the precision runs there), else the CPU
  int threads = 2;
  uint64_t seed = 0;
  std::size_t memory_budget = 0;  // 0: the device's default (Backend::default_budget)
  Strategy strategy = Strategy::Auto;
  Precision precision = Precision::FP32;
  LossScaleConfig loss_scale;  // fp16 only
  ChannelsLast channels_last = ChannelsLast::Auto;
  bool cuda_graphs = true;   // replay each micro-batch's work as a recorded CUDA graph
  bool deterministic = false;  // the same bits on every run (Graph::deterministic)
  bool fuse = true;  // fuse chains of ops into fused ops after autograd (engine/graph/fusion.h)
  Graph::ConvAlgo conv_algo = Graph::ConvAlgo::Direct;  // the CPU's 3x3 convolutions (engine/ops/conv2d_algo.h)
  // Checkpoints: where to save (at every epoch's end, every save_every optimizer steps, when stopped and
  // at the end), which weights to start from, which run to continue.
  std::string save, load, resume;
  long long save_every = 0;
  // Resuming without the checkpoint's optimizer file (<resume>.optimizer) is an error unless this says to
  // start the optimizer afresh (zero momentum, the schedule from its first step).
  bool fresh_optimizer = false;
  // What the caller records in every checkpoint beside where the run stands (train: its flags).
  CheckpointMetadata record;
  // The files the caller itself reads or writes (train: --model-file, --report), which take part in
  // the check that no output replaces an input (engine/train/run_files.h).
  std::vector<FileUse> files;
  // A JSON line per optimizer step and per epoch (engine/train/run_log.h), written by the lead rank; a
  // resumed run appends, after the lines of the steps it trains again (a killed run's, logged after its last
  // save), and so does one with log_append (a Python trainer planned again after load(), whose
  // earlier fits' lines are in the file).
  std::string log;
  bool log_append = false;
  // Data parallel, when launched by MPI: bytes per gradient bucket, seconds a collective may take.
  std::size_t bucket_cap = std::size_t{25} << 20;
  double dist_timeout = 300;

  // The checks across fields (--micro-batch <= --batch, an optimizer's or a model's own options only with
  // it, ...), as one crumb::Error naming the option; each option's own range is its row's
  // (engine/train/options.h). The Trainer calls it.
  void validate() const;
};

// The settings of cfg that change a run's result (model, data, batch, optimizer, seed, ...), as one JSON
// object, without those that do not (threads, budget, micro-batch, paths, epochs): equal strings, the
// same run. A resumed run and the ranks of a data-parallel one must agree on it. Made from the option
// table's rows that change the result (engine/train/options.cc).
std::string result_settings(const TrainConfig& cfg);

// The name a run's model goes by: the network's when cfg.network is set, else cfg.model.
std::string model_name(const TrainConfig& cfg);
// What cfg's ChannelsLast means on `device`.
bool uses_channels_last(const TrainConfig& cfg, Device device);

// The model planned for a batch and a budget, before anything is allocated.
struct RunPlan {
  Graph graph;  // with its backward graph, rewritten for swapping and recomputation
  StrategyPlan strategy;
  Device device = Device::CPU;
  std::size_t budget = 0;
  int batch = 0;  // samples per batch (a data-parallel rank plans for the largest share, rank 0's)
  // "batch 64 in 1 micro-batch(es) of 64 (largest that fits the budget)".
  std::string split;
  // Whether the fused normalisations keep their inputs alone and compute their outputs again for the
  // backward pass (engine/strategy/in_place.h): where that lets micro-batching fit the budget better.
  bool in_place = false;
  // Whether swapping or recomputing runs the unfused graph, fusing on: where it needs less memory.
  bool unfused = false;
};
// The device a config runs on (building the CUDA context where it asks for one, which reports exactly
// why there is none; the CPU for fp64 unless it names another), and its budget.
Device pick_device(const TrainConfig& cfg);
std::size_t budget_of(const TrainConfig& cfg, Device device);
// Plans cfg's model for inputs of `shape` and batches of `batch` samples on `device`, for a run over `ranks`
// processes (data-parallel: the optimizer never steps in the backward pass, whose gradients must be summed
// over the ranks first).
RunPlan plan_run(const TrainConfig& cfg, const data::DataShape& shape, int batch, Device device, int ranks = 1);
// Plans a model the caller built (`model`: inputs "x" [C, H, W] and "y" and a loss, as models::build makes
// them, in the float dtype of cfg.precision). A forward graph gets its backward pass and cfg's rewrites
// (fusion, channels-last) as a registered model does; a graph that has its backward pass already (the
// caller's own rewrites done) is planned as given.
RunPlan plan_graph(const TrainConfig& cfg, Graph model, int batch, Device device, int ranks = 1);
// A BatchNorm group must fit in the batch it normalises. named: g is the registered model cfg.model (whose
// groups cfg.norm sets), else its nodes say.
void check_bn_group(const TrainConfig& cfg, const Graph& g, int batch, bool named);
// The samples a data-parallel rank's share holds whole (batch_share's group) for cfg's model on inputs of
// `shape`: its BatchNorm groups' least common multiple (micro_batch_multiple), 1 without BatchNorm, 0 where
// BatchNorm normalises the whole batch.
int share_group(const TrainConfig& cfg, const data::DataShape& shape);
// The memory-time frontier of that plan's graph at micro-batch `micro_batch` (engine/strategy/memory_strategy.h):
// --explain --frontier and the Python module's Plan.frontier(). For a fused graph, of the graphs a fused plan
// weighs where a budget takes them (the In-Place form's or the unfused graph's points below the fused
// graph's least budget: FrontierPoint::graph), and below all of them, at a micro-batch of the whole batch,
// those graphs' with the optimizer stepping in the backward pass ("stepping").
Frontier plan_frontier(const TrainConfig& cfg, const data::DataShape& shape, int batch, Device device, int micro_batch);

// The value `key` recorded in the metadata of the checkpoint at `path` (an error where it records no run).
std::string recorded_value(const CheckpointMetadata& meta, const std::string& key, const std::string& path);

// What every checkpoint records of the data its weights were trained on, so that the checkpoint alone is
// enough to predict: the image shape "CxHxW", the number of classes, the pixel type ("uint8" | "float32")
// and the per-channel normalisation (comma-separated floats; engine/data/dataset.h's Normalization).
inline constexpr const char* kDataShapeKey = "data.shape";
inline constexpr const char* kDataClassesKey = "data.classes";
inline constexpr const char* kDataPixelsKey = "data.pixels";
inline constexpr const char* kDataMeanKey = "data.mean";
inline constexpr const char* kDataStdKey = "data.std";

// Accuracy and mean loss over a set of samples (none evaluated: samples 0, and both are 0).
struct Evaluation {
  double accuracy = 0, loss = 0;
  int samples = 0;
};

// One optimizer step, as the callbacks see it.
struct StepInfo {
  int epoch = 0;           // 0-based
  int batch = 0;           // 0-based index within the epoch
  int batches = 0;         // per epoch
  int samples = 0;         // in this batch (over every rank)
  double loss = 0;         // mean over the batch
  int64_t correct = 0;     // samples the batch's forward pass classified right (before the step)
  long long step = 0;      // optimizer steps taken, this one included (resumed runs count on)
  double lr = 0;           // the step's learning rate
  double epoch_loss = 0;   // mean over the epoch so far
  // fp16: the step's gradient overflowed, so it was skipped (nothing changed; the scale halved), and the
  // loss scale the next step runs with (1 without fp16).
  bool skipped = false;
  double loss_scale = 1;
  double samples_per_s = 0;  // over the run so far
};

struct EpochInfo {
  int epoch = 0;  // 0-based
  double train_loss = 0;
  double train_accuracy = 0;  // of the forward passes during the epoch (the weights moving under them)
  Evaluation test;            // none (samples 0) without test data
  double seconds = 0;  // the epoch's training and evaluation
  double samples_per_s = 0;  // over the run so far
};

// A tensor of a run's state by name, in host memory, row-major: what state_dict gives and
// load_state_dict takes.
struct NamedTensor {
  std::string name;
  DType dtype = DType::F32;
  Dims dims;
  const void* data = nullptr;
};
// Writes `tensors` into the host copies of `p`'s parameters and state, as Trainer::load_state_dict does
// (every name, shape and dtype checked before anything is written): what a caller's set_initial_state
// gives the Trainer.
void copy_state_dict(const std::vector<NamedTensor>& tensors, ParamStore& p);

class Trainer;

// What the Trainer calls around each training batch (Trainer::set_batch_hooks), on every rank:
// before_batch before its micro-batches run; before_step after them, when the gradient block and the
// state hold the batch's gradients and statistics, before the optimizer steps (where it steps in the
// backward pass, engine/optim/step_in_backward.h, the parameters are already updated and no gradient
// block is kept).
struct BatchHooks {
  std::function<void(Trainer&)> before_batch;
  std::function<void(Trainer&, const BatchResult&)> before_step;
};

// What fit() calls back, on the lead rank only (rank 0; the only rank without MPI). Any may throw to end
// the run; request_stop() ends it after the current step, with a save.
class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_fit_begin(Trainer&) {}
  virtual void on_epoch_begin(Trainer&, int /*epoch*/) {}
  virtual void on_step(Trainer&, const StepInfo&) {}
  virtual void on_epoch_end(Trainer&, const EpochInfo&) {}
  // After the last epoch, or when stopped (stopped_by: the signal, or 0 for a callback's request).
  virtual void on_fit_end(Trainer&, bool /*stopped*/, int /*stopped_by*/) {}
};

struct FitResult {
  long long steps = 0;           // optimizer steps of this fit
  long long samples = 0;         // trained by this fit
  long long micro_batches = 0;
  double train_seconds = 0;
  double batch_seconds = 0;      // forward + backward of every micro-batch, without the optimizer
  double last_loss = 0;          // the last epoch's mean training loss
  Evaluation test;               // after the last epoch
  bool stopped = false;          // by a signal or a callback, after a save
  int signal = 0;                // the signal that stopped it (SIGINT, SIGTERM), 0 for a callback's request
  double samples_per_s() const { return train_seconds > 0 ? samples / train_seconds : 0.0; }
};

class Trainer {
 public:
  // Reads the data (or takes `data`, shared with other trainers), connects the ranks when launched by
  // MPI (or takes `comm`, connected by the caller: connect_ranks(pick_device(cfg), cfg.dist_timeout)),
  // builds the model and plans it for the budget. A training set of no samples (only its image shape and
  // classes) makes a trainer that evaluates and predicts, planned for cfg.batch as training would be,
  // until train_more() gives it data. Nothing is allocated for training yet: the plan can be
  // inspected (plan()) before prepare() or fit() allocate.
  explicit Trainer(TrainConfig cfg, std::shared_ptr<const data::DataSplit> data = nullptr,
                   std::shared_ptr<Communicator> comm = nullptr);
  // The same for a model the caller built, as ggml's fit takes the caller's tensors: `model` is planned by
  // plan_graph, for `data`'s images. cfg.model names it in checkpoints; cfg.network, cfg.norm and
  // cfg.dropout do not apply (a norm or dropout other than the default is an error).
  Trainer(TrainConfig cfg, Graph model, std::shared_ptr<const data::DataSplit> data,
          std::shared_ptr<Communicator> comm = nullptr);
  // The same for a plan the caller made and chose (plan_run or plan_graph's, or a graph and the
  // StrategyPlan of its own plan_strategy call): the Trainer runs it as it is, without planning again. It
  // must be for cfg's device and each rank's share of a batch (plan.batch), and cfg.micro_batch, if set,
  // the plan's; cfg's budget and strategy, which chose it, do not apply.
  Trainer(TrainConfig cfg, RunPlan plan, std::shared_ptr<const data::DataSplit> data,
          std::shared_ptr<Communicator> comm = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Allocates and initialises the parameters, the optimizer and the arena, loads cfg.load and resumes
  // cfg.resume, gives every rank rank 0's weights, opens cfg.log. Once; fit() calls it.
  void prepare();
  // Starting weights of the caller's (a converted model's, a state dict given before the first step):
  // prepare() calls `set` after initialising the parameters and before loading cfg.load or resuming
  // cfg.resume, so a checkpoint named in the config always wins over them. Before prepare().
  void set_initial_state(std::function<void(ParamStore&)> set);
  // What to call around each training batch (replacing any given before).
  void set_batch_hooks(BatchHooks hooks) { hooks_ = std::move(hooks); }
  // Trains from where the run stands to cfg.epochs, evaluating after each epoch; cfg.log's lines are
  // written after the given callbacks'. An error mid-run (a data
  // file truncated under its memory map, out of memory, a callback's) first saves the last optimizer step
  // to cfg.save, as a stop does, unless the run diverged or an optimizer step failed half-way; its message
  // then ends with what was saved ("; saved the last optimizer step (12) in a.st: --resume a.st continues
  // the run", or "; nothing was saved (no --save)").
  FitResult fit(const std::vector<Callback*>& callbacks = {});
  // Starts an epoch (0-based) at batch first_batch; then train_batch() trains its batches one by one and
  // returns false at its end. The building blocks of fit, for callers that drive the loop themselves.
  void start_epoch(int epoch, int first_batch = 0);
  bool train_batch(StepInfo& info);
  // Over the test data (an error where there is none), or over `ds`, normalised like the training data.
  Evaluation evaluate();
  Evaluation evaluate(const data::Dataset& ds);
  // The model's outputs (logits, before the softmax) for every sample of ds, normalised like the training
  // data: ds.count x classes() values into `logits`, converted from the model's (float64 in a float64 run:
  // output_dtype() says which holds them exactly). ds's labels are not used beyond the loss nobody reads;
  // any valid ones do (zeros).
  void predict(const data::Dataset& ds, float* logits);
  void predict(const data::Dataset& ds, double* logits);
  // ds's images as the model sees them, normalised by the loader that feeds training and prediction:
  // ds.count x the sample's values into x, converted from the model's input dtype (output_dtype()).
  void preprocess(const data::Dataset& ds, float* x) const;
  void preprocess(const data::Dataset& ds, double* x) const;
  // What predict and preprocess compute in: float64 in a float64 run (--precision fp64), else float32.
  DType output_dtype() const { return image_dtype(); }
  int classes() const { return data_->train.num_classes; }
  // Continues the run for `epochs` more epochs on `data` (same image shape and classes as the run's),
  // after its last whole epoch (a fit stopped within an epoch starts that epoch again), its schedule
  // extended to their end: the next fit() trains them.
  void train_more(std::shared_ptr<const data::DataSplit> data, int epochs);
  // Writes a checkpoint of the weights, the optimizer and where the run stands (the whole epochs and the
  // batches of the next that it has trained, counted by the Trainer: a resume continues there), with what
  // the model's inputs were (kDataShapeKey and the other data keys below), to cfg.save unless a path is
  // given; a failed save writes the same checkpoint to a new crumb-rescue-XXXXXX.safetensors in $TMPDIR
  // (else /tmp), the save's folder or the current folder, the first that takes it, and throws, saying the
  // save failed and where. After prepare().
  void save(const std::string& path = "") { save_at(at_epoch_, at_batch_, path); }
  // The parameters (in the master dtype) and state values (running statistics, in their own dtypes) by
  // their PyTorch names, parameters first, pointing into the host copies (valid until the next step).
  // After prepare().
  std::vector<NamedTensor> state_dict();
  // Replaces them all, as torch's strict load does: every name, shape and dtype is checked (anything
  // missing, extra, given twice or of another shape or dtype is an error naming it) before anything is
  // written. After prepare().
  void load_state_dict(const std::vector<NamedTensor>& tensors);
  // Ends fit() after the step in progress, with a save, as a signal does. fit() clears the request when it
  // returns, so the next fit() trains.
  void request_stop() { stop_requested_ = true; }

  const TrainConfig& config() const { return cfg_; }
  const RunPlan& plan() const { return plan_; }
  const Graph& graph() const { return plan_.graph; }
  const data::DataSplit& data() const { return *data_; }
  Device device() const { return plan_.device; }
  int batch() const { return batch_; }  // samples per batch over every rank
  int micro_batch() const { return plan_.strategy.plan.micro_batch; }
  int ranks() const { return comm_ ? comm_->size() : 1; }
  // Rank r's share of a batch of `batch` samples: whole BatchNorm groups (engine/dist/batch_share.h).
  BatchShare share_of(int batch, int rank) const { return batch_share(batch, ranks(), rank, share_group_); }
  bool lead() const { return !comm_ || comm_->rank() == 0; }
  Communicator* communicator() { return comm_.get(); }
  bool prepared() const { return sched_ != nullptr; }
  // After prepare():
  int batches_per_epoch() const;
  ParamStore& params() { return *params_; }
  Optimizer& optimizer() { return *opt_; }
  const LossScaler& loss_scaler() const { return scaler_; }
  const Scheduler& scheduler() const { return *sched_; }
  std::size_t arena_bytes() const;
  const GradientReducer* reducer() const { return reducer_.get(); }
  // Where the run stands, what save() records: whole epochs trained, then batches of the next.
  int at_epoch() const { return at_epoch_; }
  int at_batch() const { return at_batch_; }
  int start_epoch_index() const { return start_epoch_; }  // where prepare() found the run (resume)
  int start_batch_index() const { return start_batch_; }
  // Messages for the user (a resumed run's float rounding, a checkpoint of another model), in order.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  void save_at(int epoch, int batch, const std::string& path = "");
  // The constructors' common part: reads the data, connects the ranks, plans `model` (cfg's when none)
  // unless given the plan.
  void build(std::optional<Graph> model, std::optional<RunPlan> plan, std::shared_ptr<const data::DataSplit> data);
  // prepare()'s part for cfg.resume: reads where the run stood, or starts the schedule's `run_steps` anew.
  void continue_run(long long run_steps);
  void check_finite(int epoch, int batch);
  FitResult fit_epochs(const std::vector<Callback*>& callbacks, StopOnSignal& stop_on_signal);
  void wait_for_last_save();
  // After an error escaped fit: saves the last good step where there is one and says what was saved.
  std::string after_failure();
  void make_loaders();
  // The dtype the model's input "x" takes its images in, which the loaders write: float32, or float64 in a
  // float64 graph.
  DType image_dtype() const;
  void predict_as(const data::Dataset& ds, void* logits, DType as);
  void preprocess_as(const data::Dataset& ds, void* x, DType as) const;
  // Checks that ds's images have the run's shape and its labels the run's classes (what = its role).
  void check_like_training(const data::Dataset& ds, const char* what) const;
  // Evaluates ds, whose batches loader assembles.
  Evaluation evaluate_with(const data::Dataset& ds, data::Loader& loader, const Scheduler::AfterChunk& after = {});
  // Where a loss or parameter is no longer finite (what: the error's account of it), blames the data when
  // ds holds a value that is not finite once normalised, and the learning rate otherwise (advice).
  [[noreturn]] void fail_nonfinite(const data::Dataset& ds, const char* split, const std::string& what,
                                   const char* advice) const;

  TrainConfig cfg_;
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<const data::DataSplit> data_;
  int batch_ = 0;
  int share_group_ = 1;  // the samples a rank's share holds whole (batch_share)
  RunPlan plan_;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<Optimizer> opt_;
  LossScaler scaler_;
  std::unique_ptr<data::Loader> train_loader_, test_loader_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<GradientReducer> reducer_;
  std::unique_ptr<StepInBackward> step_in_backward_;  // where the plan's graph has the optimizer step there
  std::unique_ptr<RunLog> log_;  // cfg.log, on the lead rank
  int start_epoch_ = 0, start_batch_ = 0;
  int epoch_ = 0;
  int epochs_done_ = 0;  // whole epochs trained (resumed ones included)
  int at_epoch_ = 0, at_batch_ = 0;          // where the run stands: the next batch to train
  int saved_epoch_ = -1, saved_batch_ = -1;  // where the last save to cfg.save left it
  // The epoch in progress so far (a resumed one's batches before the resume included): what its loss and
  // accuracy average over, and what a save within it records.
  struct EpochSoFar {
    double loss_sum = 0;
    long long samples = 0, correct = 0;
  } epoch_so_far_;
  bool diverged_ = false;     // a divergence check failed: the weights are not worth saving
  bool stepping_ = false;     // inside an optimizer step: the weights are half-way between two steps
  bool save_failed_ = false;  // a save failed (its error says where the weights went)
  std::atomic<bool> stop_requested_{false};  // request_stop() may come from another thread
  bool stop_agreed_ = false;  // the last step's stop decision, the same on every rank
  bool ranks_end_together_ = false;  // every rank knows the run ends after the last step
  std::function<void(ParamStore&)> initial_state_;
  BatchHooks hooks_;
  bool named_model_ = false;  // the model is cfg.model from the registry (not a network, a graph nor a plan)
  std::vector<std::string> warnings_;
  // What train_batch ran: forward + backward of every micro-batch, without the optimizer.
  double batch_seconds_ = 0;
  long long micro_batches_ = 0;
};

}  // namespace crumb
