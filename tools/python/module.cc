// crumb._crumb: the native half of the Python module. Plans and training runs over the engine's Trainer,
// configured by the option table (engine/train/options.h) that train's flags come from, so a keyword argument
// means what the flag means and fails with the flag's message. The Python half (tools/python/crumb) checks
// the keywords' types and the arrays; this file holds no engine logic either.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/base/error.h"
#include "engine/base/rss.h"
#include "engine/data/loader.h"
#include "engine/data/statistics.h"
#include "engine/io/checkpoint.h"
#include "engine/strategy/memory_report.h"
#include "engine/train/signals.h"
#include "engine/train/trainer.h"
#include "tools/python/layers.h"
#include "tools/train/figures.h"
#include "tools/train/flags.h"
#include "tools/train/report.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace crumb::python {
namespace {

// Read-only arrays (np.frombuffer, memory maps, write=False) are taken as they are: nothing here writes
// into the caller's arrays.
using Images = nb::ndarray<nb::numpy, nb::ro, nb::c_contig, nb::device::cpu, nb::ndim<4>>;
using Labels = nb::ndarray<nb::numpy, nb::ro, int32_t, nb::c_contig, nb::device::cpu, nb::ndim<1>>;
using Tensors = std::vector<std::pair<std::string, nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>>>;

// Options by name and value, as text ("micro-batch", "8"), from the Python half.
using Given = std::vector<std::pair<std::string, std::string>>;

// The config of the given options; with resume=, of the run it continues (train's rules, against train's
// table, which knows every option a checkpoint may record).
TrainConfig config_of(const Given& given) {
  Settings settings;
  for (const auto& [name, value] : given) {
    const Option* o = find_option(train::flag_table(), name);
    CRUMB_CHECK(o, "no option named '", name, "'");
    settings.push_back(setting(*o, value));
  }
  return configure(resumed(train::flag_table(), settings));
}

void put(nb::dict&) {}
template <class V, class... Rest>
void put(nb::dict& d, const char* key, V&& value, Rest&&... rest) {
  d[key] = std::forward<V>(value);
  put(d, std::forward<Rest>(rest)...);
}
// dict_of("a", 1, "b", x): {"a": 1, "b": x}.
template <class... A>
nb::dict dict_of(A&&... a) {
  nb::dict d;
  put(d, std::forward<A>(a)...);
  return d;
}

// The option table, for the Python half's keyword arguments (tools/python/gen_keywords.py writes their
// signatures from it) and its type checks.
nb::list option_table() {
  nb::list rows;
  for (const Option& o : train::flag_table()) {
    nb::list clients;
    for (auto [bit, name] : {std::pair<unsigned, const char*>{kTrainFlag, "train"}, {kPythonTrainer, "Trainer"},
                             {kPythonPlan, "plan"}})
      if (o.clients & bit) clients.append(name);
    const std::string def = o.default_value();
    rows.append(dict_of("name", o.name, "type", option_type_name(o.type), "metavar", o.metavar, "help", o.help,
                        "default", def.empty() ? nb::none() : nb::cast(def), "default_help", o.default_help,
                        "lo", o.lo, "hi", o.hi, "choices", o.choices, "bare", o.bare, "result", o.result,
                        "resumable", o.resumable, "clients", clients));
  }
  return rows;
}

nb::dict breakdown_dict(const MemoryBreakdown& mb, std::size_t budget) {
  nb::dict d;
  d["micro_batch"] = mb.micro_batch;
  for (const train::MemoryPart& part : train::memory_parts()) d[part.name] = part.bytes(mb);
  d["total"] = mb.total();
  d["fits"] = mb.total() <= budget;
  return d;
}

// The plan of a run, before anything is allocated: what train --explain and --report show.
class Plan {
 public:
  explicit Plan(const Given& given) {
    cfg_ = config_of(given);
    const data::DataShape shape = data::data_shape(cfg_.data);
    run_ = std::make_unique<RunPlan>(plan_run(cfg_, shape, cfg_.batch, pick_device(cfg_)));
    report_ = train::collect_report(run_->graph, run_->strategy.plan, run_->batch, run_->budget, cfg_.optimizer,
                                    run_->device, {});
    report_.title = cfg_.model + " (" + std::to_string(shape.channels) + "x" + std::to_string(shape.height) + "x" +
                    std::to_string(shape.width) + ") on " + device_name(run_->device) + ", " +
                    precision_name(cfg_.precision);
    report_.subtitle = run_->split;
  }

  int micro_batch() const { return report_.micro_batch(); }
  const MemoryBreakdown& memory() const { return report_.memory; }
  std::size_t budget() const { return run_->budget; }
  int batch() const { return run_->batch; }
  std::string split() const { return run_->split; }
  std::string device() const { return device_name(run_->device); }
  std::string precision() const { return precision_name(cfg_.precision); }
  std::string title() const { return report_.title; }
  std::string strategy() const { return run_->strategy.choice.used; }
  bool step_in_backward() const { return run_->graph.step_in_backward(); }

  // What train --explain prints.
  std::string explain() const {
    std::ostringstream os;
    os << cfg_.model << " on " << device() << " in " << precision() << ", " << run_->split << "\n";
    write_strategy_report(os, run_->graph, run_->strategy);
    write_memory_report(os, run_->graph, run_->strategy.plan.memory, report_.plan, run_->budget);
    return os.str();
  }
  nb::list breakdown() const {
    nb::list rows;
    for (const BreakdownRow& r : breakdown_rows(report_.memory, run_->budget))
      rows.append(dict_of("part", r.label, "bytes", r.bytes, "dtype", r.dtype, "holds", r.note));
    return rows;
  }
  // The report's tables: id -> (caption, header, rows of strings).
  nb::dict tables() const {
    nb::dict out;
    for (const train::Table& t : train::report_tables(report_))
      out[t.id.c_str()] = nb::make_tuple(t.caption, t.header, t.rows);
    return out;
  }
  std::string svg(const std::string& name) {
    if (name == "arena_map") return train::arena_map_svg(report_);
    if (name == "timeline") return train::timeline_svg(report_);
    if (name == "sweep") return train::sweep_svg(report_);
    if (name == "frontier") return train::frontier_svg(with_frontier());
    CRUMB_FAIL("no picture named '", name, "' (arena_map, timeline, sweep or frontier)");
  }
  std::string html(bool fragment) const { return train::report_html(report_, fragment); }
  void save_report(const std::string& path, const std::string& dir) const {
    train::ReportOutput(path, dir).write(report_);
  }
  // The memory of other micro-batch sizes (one row each), as the report's sweep has it.
  nb::list sweep(const std::vector<int>& sizes) const {
    nb::list rows;
    for (int m : sizes) {
      CRUMB_CHECK(m >= 1 && m <= run_->batch, "sweep: micro-batch ", m, " is outside [1, ", run_->batch, "]");
      check_micro_batch(run_->graph, m, run_->batch);
      rows.append(breakdown_dict(measure_memory(run_->graph, m, cfg_.optimizer, run_->device, 0, run_->batch),
                                 run_->budget));
    }
    return rows;
  }
  // The memory-time frontier at the plan's micro-batch (train --explain --frontier): a row per point, from
  // the least memory to in memory.
  nb::list frontier() {
    const Frontier& f = *with_frontier().frontier;
    nb::list rows;
    const FrontierPoint& full = f.points.back();
    for (const FrontierPoint& p : f.points)
      rows.append(dict_of("total", p.total, "memory_ratio", double(p.total) / double(full.total), "predicted_s",
                          p.predicted_seconds, "time_ratio", p.predicted_seconds / full.predicted_seconds, "plan",
                          p.used, "kept", p.kept, "recomputed", p.recomputed, "recomputed_twice", p.twice, "graph", p.graph, "swapped", p.swapped, "kept_bytes",
                          p.kept_bytes, "recomputed_bytes", p.recomputed_bytes, "swapped_bytes", p.swapped_bytes,
                          "fits", p.total <= run_->budget));
    return rows;
  }
  nb::list default_sweep() const {
    nb::list rows;
    for (const MemoryBreakdown& mb : report_.sweep) rows.append(breakdown_dict(mb, run_->budget));
    return rows;
  }

 private:
  // The report with the frontier, measured once (its kernel times) on first use: frontier() and
  // svg("frontier") show the same points, and the report shows them once either was asked for.
  const train::ReportData& with_frontier() {
    if (!report_.frontier)
      report_.frontier = plan_frontier(cfg_, data::data_shape(cfg_.data), run_->batch, run_->device, micro_batch());
    return report_;
  }

  TrainConfig cfg_;
  std::unique_ptr<RunPlan> run_;  // report_ points into its graph
  train::ReportData report_;
};

// Where older checkpoints of the module recorded the normalisation (now the engine's kDataMeanKey/kDataStdKey).
constexpr const char* kOldMeanKey = "python.mean";
constexpr const char* kOldStdKey = "python.std";

// Keeps a numpy array alive for as long as a dataset reads its memory in place (released under the GIL,
// from whichever thread drops the dataset last).
std::shared_ptr<const void> hold(const Images& array) {
  return std::shared_ptr<const Images>(new Images(array), [](const Images* p) {
    nb::gil_scoped_acquire gil;
    delete p;
  });
}

// The images in place (uint8 or float32, N x C x H x W, read-only arrays and memory maps included) and a
// copy of the labels (int32, checked by the Python half against the class count).
data::Dataset dataset_of(const Images& x, const int32_t* labels, std::size_t count, int classes) {
  const bool u8 = x.dtype() == nb::dtype<uint8_t>();
  CRUMB_CHECK(u8 || x.dtype() == nb::dtype<float>(), "images must be uint8 or float32");
  CRUMB_CHECK(count == x.shape(0), "there are ", x.shape(0), " images but ", count, " labels");
  CRUMB_CHECK(x.shape(0) < (std::size_t{1} << 31), "at most 2^31 - 1 images, got ", x.shape(0));
  data::Dataset ds;
  ds.count = static_cast<int>(x.shape(0));
  ds.channels = static_cast<int>(x.shape(1));
  ds.height = static_cast<int>(x.shape(2));
  ds.width = static_cast<int>(x.shape(3));
  ds.num_classes = classes;
  ds.labels.assign(labels, labels + count);
  for (int32_t label : ds.labels)
    CRUMB_CHECK(label >= 0 && label < classes, "label ", label, " is outside [0, ", classes, ")");
  ds.mapped.data = x.data();
  ds.mapped.type = u8 ? data::PixelType::U8 : data::PixelType::F32;
  ds.mapped.owner = hold(x);
  return ds;
}

// Samples without labels (what predict and preprocess read): every label 0.
data::Dataset unlabelled(const Images& x, int classes) {
  const std::vector<int32_t> zeros(x.shape(0), 0);
  return dataset_of(x, zeros.data(), zeros.size(), classes);
}

class Run;

// fit's callbacks into Python: one callable receives (event, dict) for the events "fit_begin",
// "epoch_begin", "step", "epoch_end" and "fit_end"; epochs and batches are counted from 1. An exception
// raised there (a KeyboardInterrupt from Ctrl-C, noticed at each step; a BrokenPipeError of a progress
// line; the user's own) stops the run after the step in progress, with its save, as a signal stops
// train; later events are not sent, and fit raises the exception itself once the run has stopped.
class PythonEvents : public Callback {
 public:
  PythonEvents(Run& run, nb::object fn) : run_(run), fn_(std::move(fn)) {}
  void on_fit_begin(Trainer& t) override;
  void on_epoch_begin(Trainer& t, int epoch) override;
  void on_step(Trainer& t, const StepInfo& s) override;
  void on_epoch_end(Trainer& t, const EpochInfo& e) override;
  void on_fit_end(Trainer& t, bool stopped, int signal) override;
  // The first exception a callback raised (destroyed with the GIL held, by fit).
  std::unique_ptr<nb::python_error> pending;

 private:
  // With the GIL held.
  template <class MakeDict>
  void send(Trainer& t, const char* event, MakeDict make) {
    if (pending) return;
    try {
      fn_(event, make());
    } catch (nb::python_error& e) {
      pending = std::make_unique<nb::python_error>(std::move(e));
      t.request_stop();
    }
  }
  Run& run_;
  nb::object fn_;
};

nb::dict evaluation_dict(const Evaluation& e) {
  return dict_of("loss", e.loss, "accuracy", e.accuracy, "samples", e.samples);
}

// A training run on arrays. Built by the first fit (or evaluate/predict/preprocess/state_dict), which
// plans the model for the arrays' image shape; later fits continue it.
//
// One call at a time: the GIL is released while the engine runs, so a second thread could otherwise enter
// the same run and corrupt it. Each call holds the run (Call, checked and set under the GIL); a call from
// another thread meanwhile is an error, and a callback of fit may only make the calls that leave the
// training state alone (state_dict, load_state_dict, evaluate, predict, preprocess, save).
class Run {
 public:
  explicit Run(const Given& given) : config_(config_of(given)) {}

  // The per-channel normalisation to apply (mean/std of the Trainer), instead of the one the weights
  // were trained with or the training images' own.
  void set_normalization(std::vector<float> mean, std::vector<float> std) {
    Call call(*this, "set_normalization", false);
    CRUMB_CHECK(!trainer_, "the normalisation is set before the model is built");
    given_norm_ = data::Normalization(std::move(mean), std::move(std));
  }

  void fit(const Images& x, const Labels& y, std::optional<Images> xv, std::optional<Labels> yv, int classes,
           int epochs, nb::object events) {
    Call call(*this, "fit", false);
    auto split = std::make_shared<data::DataSplit>();
    split->train = dataset_of(x, y.data(), y.shape(0), classes);
    if (xv) split->test = dataset_of(*xv, yv->data(), yv->shape(0), classes);
    // Later fits normalise like the first, whose statistics the weights have learnt.
    split->norm = norm_settled_ ? trainer_->data().norm : normalization(split->train);
    split->source = "numpy arrays";
    if (!trainer_)
      build(split, epochs);
    else
      trainer_->train_more(split, epochs);
    norm_settled_ = true;
    PythonEvents callbacks(*this, std::move(events));
    FitResult r;
    {
      // SIGTERM (timeout, a batch system's end of job) stops the run as Ctrl-C does, where the program
      // left its default action, which ended the process at once and lost the steps since the last save.
      CatchTerminate term;
      nb::gil_scoped_release release;
      r = trainer_->fit({&callbacks});
    }
    if (callbacks.pending) throw std::move(*callbacks.pending);
    // The program ends as a terminated one does, through its finally blocks: SystemExit(128 + 15).
    if (r.stopped && r.signal == SIGTERM) {
      PyErr_SetObject(PyExc_SystemExit, nb::int_(128 + SIGTERM).ptr());
      throw nb::python_error();
    }
  }

  nb::dict evaluate(const Images& x, const Labels& y, int classes) {
    Call call(*this, "evaluate", true);
    const data::Dataset ds = dataset_of(x, y.data(), y.shape(0), classes);
    ensure(ds);
    Evaluation e;
    {
      nb::gil_scoped_release release;
      e = trainer_->evaluate(ds);
    }
    return evaluation_dict(e);
  }

  // The logits, float64 in an fp64 run (Trainer::output_dtype), else float32.
  nb::object predict(const Images& x, int classes) {
    Call call(*this, "predict", true);
    const data::Dataset ds = unlabelled(x, classes);
    ensure(ds);
    return output_array({static_cast<std::size_t>(ds.count), static_cast<std::size_t>(trainer_->classes())},
                        [&](auto* out) { trainer_->predict(ds, out); });
  }

  // x as the network sees it, normalised by the loader that feeds training and prediction.
  nb::object preprocess(const Images& x, int classes) {
    Call call(*this, "preprocess", true);
    const data::Dataset ds = unlabelled(x, classes);
    ensure(ds);
    return output_array({x.shape(0), x.shape(1), x.shape(2), x.shape(3)},
                        [&](auto* out) { trainer_->preprocess(ds, out); });
  }

  // A new numpy array of `shape` in the run's output dtype, which fill writes (given a float* or a
  // double*) with the GIL released.
  template <class Fill> nb::object output_array(const std::vector<std::size_t>& shape, Fill fill) {
    const DType dtype = trainer_->output_dtype();
    std::size_t count = 1;
    for (std::size_t d : shape) count *= d;
    auto* out = new std::vector<unsigned char>(count * dtype_size(dtype));
    nb::capsule owner(out, [](void* p) noexcept { delete static_cast<std::vector<unsigned char>*>(p); });
    {
      nb::gil_scoped_release release;
      if (dtype == DType::F64) fill(reinterpret_cast<double*>(out->data()));
      else fill(reinterpret_cast<float*>(out->data()));
    }
    return nb::cast(nb::ndarray<nb::numpy>(out->data(), shape.size(), shape.data(), owner, nullptr, numpy_dtype(dtype)));
  }

  // Parameters and state (running statistics) by their PyTorch names, as float32/... numpy copies.
  nb::list state_dict() {
    Call call(*this, "state_dict", true);
    CRUMB_CHECK(trainer_, "the model has no weights yet: fit, evaluate or predict first (or load_state_dict)");
    nb::list out;
    for (const NamedTensor& t : trainer_->state_dict()) {
      std::vector<std::size_t> shape(t.dims.begin(), t.dims.end());
      const std::size_t bytes = static_cast<std::size_t>(dims_count(t.dims)) * dtype_size(t.dtype);
      out.append(nb::make_tuple(t.name, numpy_copy(t.data, bytes, t.dtype, shape)));
    }
    return out;
  }

  // Exact names and shapes (torch's strict load; the Python half has converted the dtypes): anything
  // missing or extra is an error, and nothing is written unless everything fits. Before the model is built (by the first fit, evaluate or
  // predict) they are kept, and become its starting weights then; the latest of load_state_dict and load
  // wins.
  void load_state_dict(const Tensors& tensors) {
    Call call(*this, "load_state_dict", true);
    if (!trainer_) {
      initial_ = tensors;
      config_.load.clear();
      return;
    }
    trainer_->load_state_dict(named(tensors));
  }

  // Starts over from the checkpoint's weights and optimizer state (train's --load) and the normalisation,
  // classes and image shape it records: the model is planned again at the next call.
  void load(const std::string& path) {
    Call call(*this, "load", false);
    {
      nb::gil_scoped_release release;
      checkpoint_metadata(path);  // a damaged or missing file fails here, leaving the run as it was
    }
    trainer_.reset();
    initial_.reset();
    config_.load = path;
    norm_settled_ = false;
  }

  // A checkpoint of the weights, the optimizer and where the run stands, as train --save writes it.
  void save(const std::string& path) {
    Call call(*this, "save", true);
    CRUMB_CHECK(trainer_ && trainer_->prepared(), "save: nothing to save before the first fit");
    nb::gil_scoped_release release;
    trainer_->save(path);
  }

  // Ends the fit in progress after its step, with a save, as Ctrl-C does (from a callback or any thread).
  void request_stop() {
    if (trainer_) trainer_->request_stop();
  }

  nb::dict info() const {
    nb::dict d = dict_of("epoch", trainer_ ? trainer_->at_epoch() : 0, "batch", trainer_ ? trainer_->at_batch() : 0,
                         "built", trainer_ != nullptr, "precision", std::string(precision_name(config_.precision)));
    if (trainer_) {
      d["epochs"] = trainer_->config().epochs;  // where the run ends (later fits extend it)
      d["micro_batch"] = trainer_->micro_batch();
      d["split"] = trainer_->plan().split;
      d["device"] = device_name(trainer_->device());
      d["steps"] = trainer_->prepared() ? trainer_->optimizer().steps() : 0LL;
      d["mean"] = trainer_->data().norm.mean;
      d["std"] = trainer_->data().norm.std;
    }
    return d;
  }

 private:
  friend class PythonEvents;

  class Call {
   public:
    Call(Run& run, const char* what, bool from_callback) : run_(run) {
      if (run.depth_ > 0) {
        CRUMB_CHECK(run.owner_ == std::this_thread::get_id(), what, ": this Trainer is running ", run.what_,
                    " in another thread; a Trainer runs one call at a time (wait for it, or use a Trainer per thread)");
        CRUMB_CHECK(from_callback, what, " cannot be called from a callback of ", run.what_);
      } else {
        run.owner_ = std::this_thread::get_id();
        run.what_ = what;
      }
      ++run.depth_;
    }
    ~Call() { --run_.depth_; }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    Run& run_;
  };

  // The arrays as the engine's named tensors (pointing into them).
  static std::vector<NamedTensor> named(const Tensors& tensors) {
    std::vector<NamedTensor> out;
    for (const auto& [name, array] : tensors) {
      Dims dims;
      for (std::size_t i = 0; i < array.ndim(); ++i) dims.push_back(static_cast<int64_t>(array.shape(i)));
      out.push_back({name, dtype_of(array), dims, array.data()});
    }
    return out;
  }
  // A numpy array's dtype as the engine's, or U8 (which no parameter or state has) for any other. crumb's
  // load_state_dict has converted every array to float32 or int64 by then, as torch converts them.
  static DType dtype_of(const nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>& array) {
    for (DType t : {DType::F32, DType::F64, DType::I64, DType::I32})
      if (array.dtype() == numpy_dtype(t)) return t;
    return DType::U8;
  }
  // Given, else the one the weights were trained with (recorded in the checkpoint they come from), else the
  // images' own (uint8), else none (float32 images are taken as they are).
  data::Normalization normalization(const data::Dataset& images) const {
    if (given_norm_) return *given_norm_;
    for (const std::string& path : {config_.resume, config_.load}) {
      if (path.empty()) continue;
      std::vector<float> m, s, old_m, old_s;
      for (const auto& [key, value] : checkpoint_metadata(path)) {
        if (key == kDataMeanKey) m = floats(value, path);
        if (key == kDataStdKey) s = floats(value, path);
        if (key == kOldMeanKey) old_m = floats(value, path);
        if (key == kOldStdKey) old_s = floats(value, path);
      }
      if (!m.empty() && !s.empty()) return {m, s};
      if (!old_m.empty() && !old_s.empty()) return {old_m, old_s};
    }
    if (images.pixel_type() == data::PixelType::U8) return data::channel_statistics(images);
    return {0.f, 1.f};
  }
  static std::vector<float> floats(const std::string& text, const std::string& path) {
    std::vector<float> out;
    std::istringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
      char* end = nullptr;
      out.push_back(std::strtof(item.c_str(), &end));
      CRUMB_CHECK(!item.empty() && end && *end == '\0' && std::isfinite(out.back()), path, ": '", text,
                  "' is not a list of numbers");
    }
    return out;
  }
  static nb::dlpack::dtype numpy_dtype(DType t) {
    switch (t) {
      case DType::F32: return nb::dtype<float>();
      case DType::F64: return nb::dtype<double>();
      case DType::I64: return nb::dtype<int64_t>();
      case DType::I32: return nb::dtype<int32_t>();
      default: CRUMB_FAIL("no numpy dtype for ", dtype_name(t));
    }
  }
  static nb::object numpy_copy(const void* data, std::size_t bytes, DType dtype, const std::vector<std::size_t>& shape) {
    auto* copy = new std::vector<unsigned char>(static_cast<const unsigned char*>(data),
                                                static_cast<const unsigned char*>(data) + bytes);
    nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<unsigned char>*>(p); });
    return nb::cast(nb::ndarray<nb::numpy>(copy->data(), shape.size(), shape.data(), owner, nullptr,
                                           numpy_dtype(dtype)));
  }
  // A trainer that evaluates and predicts (weights from load=/resume=, a state dict, or the initial ones),
  // planned for the configured batch as training would be: so a BatchNorm model predicts a single image
  // with the plan that later trains, whatever its group size. A later fit gives it data.
  void ensure(const data::Dataset& ds) {
    if (trainer_) return;
    auto split = std::make_shared<data::DataSplit>();
    split->train.channels = ds.channels;
    split->train.height = ds.height;
    split->train.width = ds.width;
    split->train.num_classes = ds.num_classes;
    split->train.count = 0;
    split->norm = normalization(ds);
    split->source = "numpy arrays";
    norm_settled_ = given_norm_ || !config_.load.empty() || !config_.resume.empty();
    build(split, 0);
  }
  void build(std::shared_ptr<const data::DataSplit> split, int epochs) {
    TrainConfig cfg = config_;
    if (epochs > 0) cfg.epochs = epochs;
    cfg.data.dataset = "numpy";
    std::optional<Tensors> initial = std::move(initial_);
    initial_.reset();
    {
      nb::gil_scoped_release release;
      trainer_ = std::make_unique<Trainer>(cfg, std::move(split));
      if (initial)
        trainer_->set_initial_state([&](ParamStore& p) {
          nb::gil_scoped_acquire gil;  // the arrays are Python objects
          copy_state_dict(named(*initial), p);
        });
      try {
        trainer_->prepare();
      } catch (...) {
        trainer_.reset();
        throw;
      }
    }
    config_.log_append = !config_.log.empty();  // a trainer planned again goes on in the same log
  }

  TrainConfig config_;
  std::unique_ptr<Trainer> trainer_;
  std::optional<Tensors> initial_;  // load_state_dict's before the model was built
  std::optional<data::Normalization> given_norm_;
  // The trainer's normalisation came from mean/std, a checkpoint or training data (not from the images
  // of a prediction made before any of them).
  bool norm_settled_ = false;
  std::thread::id owner_;      // the thread of the call in progress (depth_ > 0)
  const char* what_ = "";
  int depth_ = 0;
};

void PythonEvents::on_fit_begin(Trainer& t) {
  nb::gil_scoped_acquire gil;
  send(t, "fit_begin", [] { return nb::dict(); });
}

void PythonEvents::on_epoch_begin(Trainer& t, int epoch) {
  nb::gil_scoped_acquire gil;
  send(t, "epoch_begin", [&] { return dict_of("epoch", epoch + 1, "epochs", t.config().epochs); });
}

void PythonEvents::on_step(Trainer& t, const StepInfo& s) {
  nb::gil_scoped_acquire gil;
  if (pending) return;
  if (PyErr_CheckSignals() != 0) {
    pending = std::make_unique<nb::python_error>();
    t.request_stop();
    return;
  }
  send(t, "step", [&] {
    return dict_of("epoch", s.epoch + 1, "epochs", t.config().epochs, "batch", s.batch + 1, "batches", s.batches,
                   "samples", s.samples, "loss", s.loss, "step", s.step, "lr", s.lr, "epoch_loss", s.epoch_loss,
                   "skipped", s.skipped, "loss_scale", s.loss_scale, "samples_per_s", s.samples_per_s);
  });
}

void PythonEvents::on_epoch_end(Trainer& t, const EpochInfo& e) {
  nb::gil_scoped_acquire gil;
  send(t, "epoch_end", [&] {
    nb::dict d = dict_of("epoch", e.epoch + 1, "loss", e.train_loss, "accuracy", e.train_accuracy, "seconds",
                         e.seconds, "samples_per_s", e.samples_per_s, "micro_batch", t.micro_batch(), "arena_bytes",
                         t.arena_bytes(), "memory_bytes", t.plan().strategy.plan.memory.total(), "max_rss_bytes",
                         max_rss_bytes(), "step", t.optimizer().steps());
    if (e.test.samples) {
      d["val_loss"] = e.test.loss;
      d["val_accuracy"] = e.test.accuracy;
    }
    return d;
  });
}

void PythonEvents::on_fit_end(Trainer& t, bool stopped, int signal) {
  nb::gil_scoped_acquire gil;
  send(t, "fit_end", [&] { return dict_of("stopped", stopped, "signal", signal, "step", t.optimizer().steps()); });
}

}  // namespace
}  // namespace crumb::python

NB_MODULE(_crumb, m) {
  using namespace crumb;
  using crumb::python::Plan;
  using crumb::python::Run;
  m.doc() = "Crumb's engine: plans and training runs (use the crumb package, not this module)";
  nb::exception<Error>(m, "Error", PyExc_RuntimeError);

  m.def("options", &crumb::python::option_table, "The option table: name, type, default, help, clients, ...");
  m.def("models", [] { return models::names(); });
  m.def("checkpoint_metadata", [](const std::string& path) { return checkpoint_metadata(path); },
        "The checkpoint's metadata entries, in file order (its header is validated; no tensor is read).");
  m.def(
      "recorded_options",
      [](const std::string& path) {
        std::vector<std::pair<std::string, std::string>> out;
        for (const Setting& s : recorded_settings(train::flag_table(), path)) out.emplace_back(s.name(), s.value);
        return out;
      },
      "The options of the run a checkpoint records, as (name, value) pairs.");
  crumb::python::add_layers(m);
  m.def("format_bytes", &format_bytes);
  m.def("parse_bytes", &parse_bytes);

  nb::class_<Plan>(m, "Plan")
      .def(nb::init<const crumb::python::Given&>())
      .def_prop_ro("micro_batch", &Plan::micro_batch)
      .def_prop_ro("arena_bytes", [](const Plan& p) { return p.memory().arena; })
      .def_prop_ro("activation_bytes", [](const Plan& p) { return p.memory().activations; })
      .def_prop_ro("workspace_bytes", [](const Plan& p) { return p.memory().workspace; })
      .def_prop_ro("persistent_bytes", [](const Plan& p) { return p.memory().persistent(); })
      .def_prop_ro("total_bytes", [](const Plan& p) { return p.memory().total(); })
      .def_prop_ro("budget", &Plan::budget)
      .def_prop_ro("batch", &Plan::batch)
      .def_prop_ro("split", &Plan::split)
      .def_prop_ro("device", &Plan::device)
      .def_prop_ro("precision", &Plan::precision)
      .def_prop_ro("title", &Plan::title)
      .def_prop_ro("strategy", &Plan::strategy)
      .def_prop_ro("step_in_backward", &Plan::step_in_backward)
      .def("explain", &Plan::explain)
      .def("breakdown", &Plan::breakdown)
      .def("tables", &Plan::tables)
      .def("svg", &Plan::svg)
      .def("html", &Plan::html, "fragment"_a = false)
      .def("save_report", &Plan::save_report, "path"_a, "dir"_a = "")
      .def("sweep", &Plan::sweep)
      .def("default_sweep", &Plan::default_sweep)
      .def("frontier", &Plan::frontier);

  nb::class_<Run>(m, "Run")
      .def(nb::init<const crumb::python::Given&>())
      .def("set_normalization", &Run::set_normalization)
      .def("fit", &Run::fit, "x"_a, "y"_a, "xv"_a.none(), "yv"_a.none(), "classes"_a, "epochs"_a, "events"_a)
      .def("evaluate", &Run::evaluate)
      .def("predict", &Run::predict)
      .def("preprocess", &Run::preprocess)
      .def("state_dict", &Run::state_dict)
      .def("load_state_dict", &Run::load_state_dict)
      .def("save", &Run::save)
      .def("load", &Run::load)
      .def("request_stop", &Run::request_stop)
      .def("info", &Run::info);
}
