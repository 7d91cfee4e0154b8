#include "engine/train/options.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <type_traits>

#include "engine/base/error.h"
#include "engine/io/json.h"
#include "engine/strategy/memory_report.h"
#include "engine/train/network.h"

namespace crumb {
namespace {

// Plain decimal digits with an optional '-': strtoll alone would also take " 2", "+2" and "2 ".
bool plain_integer(const std::string& s) {
  const std::size_t start = !s.empty() && s[0] == '-' ? 1 : 0;
  return s.size() > start && s.find_first_not_of("0123456789", start) == std::string::npos;
}

long long parse_int(const std::string& what, const std::string& s, long long lo, long long hi) {
  CRUMB_CHECK(plain_integer(s), "--", what, ": '", s, "' is not an integer");
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  CRUMB_CHECK(end && *end == '\0' && errno == 0, "--", what, ": '", s, "' is not an integer");
  CRUMB_CHECK(v >= lo && v <= hi, "--", what, ": ", v, " is out of range [", lo, ", ", hi, "]");
  return v;
}

double parse_float(const std::string& what, const std::string& s, double lo, double hi) {
  // Decimal notation only ("0.05", "-1", "1e-4"): no sign '+', spaces, hex floats, inf or nan.
  CRUMB_CHECK(!s.empty() && s.find_first_not_of("0123456789.eE-+") == std::string::npos && s[0] != '+' &&
                  s[0] != 'e' && s[0] != 'E',
              "--", what, ": '", s, "' is not a number");
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  CRUMB_CHECK(end && *end == '\0' && errno == 0 && std::isfinite(v), "--", what, ": '", s, "' is not a number");
  CRUMB_CHECK(v >= lo && v <= hi, "--", what, ": ", v, " is out of range [", lo, ", ", hi, "]");
  return v;
}

// The shortest decimal text that reads back as exactly v ("0.05", "300", "1e-08").
std::string float_text(double v) {
  char buf[40];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Bytes in the largest unit that holds them exactly ("25MiB", "1000"): parse_bytes reads it back.
std::string size_text(std::size_t bytes) {
  for (auto [shift, unit] : {std::pair<int, const char*>{30, "GiB"}, {20, "MiB"}, {10, "KiB"}})
    if (bytes && bytes % (std::size_t{1} << shift) == 0) return std::to_string(bytes >> shift) + unit;
  return std::to_string(bytes);
}

// "a, b or c".
std::string listed(const std::vector<std::string>& names, const char* last = " or ") {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? last : ", ") + names[i];
  return out;
}

std::string joined(const std::vector<std::string>& names, const char* sep) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : sep) + n;
  return out;
}

// A row under construction. A field binds through a generic accessor, [](auto& c) -> auto& { return
// c.batch; }, which reads a const config (get) and fills a mutable one (set).
class Row {
 public:
  Row(const char* name, OptionType type) {
    o_.name = name;
    o_.type = type;
  }
  Row& metavar(const char* m) { return o_.metavar = m, *this; }
  Row& help(std::string h) { return o_.help = std::move(h), *this; }
  Row& range(double lo, double hi) { return o_.lo = lo, o_.hi = hi, *this; }
  Row& word(const char* w, long long value) { return o_.choices = {w}, o_.word_value = value, *this; }
  Row& choices(std::vector<std::string> names) { return o_.choices = std::move(names), *this; }
  Row& bare() { return o_.bare = true, *this; }
  Row& defaults(std::string text) { return o_.default_help = std::move(text), *this; }
  Row& result() { return o_.result = true, *this; }
  Row& resumable() { return o_.resumable = true, *this; }
  Row& clients(unsigned c) { return o_.clients = c, *this; }
  // Int, Size: the value that means "none given" (0 for --micro-batch: the budget decides), shown as "".
  Row& none_at(long long v) { return none_ = v, has_none_ = true, *this; }
  Row& needs(std::function<std::string(const TrainConfig&)> f) { return o_.needs = std::move(f), *this; }
  Row& set(std::function<void(TrainConfig&, const OptionValue&)> f) { return o_.set = std::move(f), *this; }
  Row& get(std::function<std::string(const TrainConfig&)> f) { return o_.get = std::move(f), *this; }

  // Int, Float, Size, Text, Path, Bool: the member f(cfg) returns.
  template <class F>
  Row& field(F f) {
    using T = std::decay_t<decltype(f(std::declval<TrainConfig&>()))>;
    const OptionType type = o_.type;
    const bool has_none = has_none_;
    const long long none = none_;
    const std::string word = o_.choices.empty() ? "" : o_.choices[0];
    const long long word_value = o_.word_value;
    o_.set = [f, type](TrainConfig& c, const OptionValue& v) {
      if constexpr (std::is_same_v<T, std::string>) {
        f(c) = v.text;
      } else if constexpr (std::is_same_v<T, bool>) {
        f(c) = v.on;
      } else if constexpr (std::is_floating_point_v<T>) {
        f(c) = v.number;
      } else {
        (void)type;
        f(c) = static_cast<T>(v.integer);
      }
    };
    o_.get = [f, type, has_none, none, word, word_value](const TrainConfig& c) -> std::string {
      const auto& v = f(c);
      if constexpr (std::is_same_v<T, std::string>) {
        return v;
      } else if constexpr (std::is_same_v<T, bool>) {
        return v ? "on" : "off";
      } else if constexpr (std::is_floating_point_v<T>) {
        return float_text(v);
      } else {
        const long long n = static_cast<long long>(v);
        if (has_none && n == none) return "";
        if (!word.empty() && n == word_value) return word;
        return type == OptionType::Size ? size_text(static_cast<std::size_t>(v)) : std::to_string(n);
      }
    };
    return *this;
  }
  // Choice: names for the values of an enum member.
  template <class E, class F>
  Row& choice_field(std::vector<std::pair<std::string, E>> names, F f) {
    o_.choices.clear();
    for (const auto& [name, value] : names) o_.choices.push_back(name);
    o_.set = [names, f](TrainConfig& c, const OptionValue& v) {
      for (const auto& [name, value] : names)
        if (name == v.text) f(c) = value;
    };
    o_.get = [names, f](const TrainConfig& c) -> std::string {
      for (const auto& [name, value] : names)
        if (f(c) == value) return name;
      return "";
    };
    return *this;
  }
  const Option& option() const { return o_; }

 private:
  Option o_;
  long long none_ = 0;
  bool has_none_ = false;
};

constexpr unsigned kEveryClient = kTrainFlag | kPythonTrainer | kPythonPlan;
constexpr unsigned kTraining = kTrainFlag | kPythonTrainer;  // a run's, not a plan's
constexpr unsigned kPlanned = kTrainFlag | kPythonPlan;      // synthetic data's shape: a plan's

// The models that have normalisation layers ("resnet20, resnet18, ..."), from the registry.
std::string models_with_norm() {
  std::vector<std::string> out;
  for (const std::string& n : models::names())
    if (models::has_norm(n)) out.push_back(n);
  return joined(out, ", ");
}

const char* const kNamedModel =
    "a named model: a network chooses its own layers (batch_norm2d or group_norm nodes; dropout nodes with their "
    "own p)";

std::string norm_needs(const TrainConfig& c) {
  if (!c.network.empty() || c.graph_given) return kNamedModel;
  return models::has_norm(c.model) ? "" : "a model with normalisation layers (" + models_with_norm() + ")";
}

std::string bn_needs(const TrainConfig& c) {
  if (c.graph_given) return kNamedModel;
  if (!c.network.empty())
    return parse_network(c.network, "the network description").has_batch_norm() ? ""
                                                                                 : "a network with batch_norm2d nodes";
  const std::string norm = norm_needs(c);
  if (!norm.empty()) return norm;
  return c.norm.kind == models::NormSpec::Kind::Batch ? "" : "--norm bn";
}

std::string dropout_needs(const TrainConfig& c) {
  if (!c.network.empty() || c.graph_given) return kNamedModel;
  return models::has_dropout(c.model) ? "" : "a model with dropout (vgg11_bn)";
}

std::string sgd_needs(const TrainConfig& c) { return c.optimizer.kind == OptimizerKind::Sgd ? "" : "--optimizer sgd"; }
std::string adamw_needs(const TrainConfig& c) {
  return c.optimizer.kind == OptimizerKind::AdamW ? "" : "--optimizer adamw";
}
std::string step_needs(const TrainConfig& c) {
  return c.optimizer.schedule.kind == LrSchedule::Kind::Step ? "" : "--lr-schedule step";
}
std::string synthetic_needs(const TrainConfig& c) { return c.data.dataset == "synthetic" ? "" : "--dataset synthetic"; }
std::string fp16_needs(const TrainConfig& c) {
  return c.precision == Precision::FP16 ? "" : "--precision fp16 (bf16 and float32 need no loss scale)";
}

std::vector<Option> engine_rows() {
  using Kind = models::NormSpec::Kind;
  std::vector<Row> rows;
  auto add = [&](const char* name, OptionType type) -> Row& { return rows.emplace_back(name, type); };
  using T = OptionType;

  add("model", T::Text).metavar("NAME").result().clients(kEveryClient)
      .help(joined(models::names(), " | ") +
            " (vgg11_bn: images of at least 32x32, e.g. --dataset cifar10)")
      .field([](auto& c) -> auto& { return c.model; })
      .get([](const TrainConfig& c) { return model_name(c); });
  add("network", T::Text).metavar("JSON").result()
      .help("your own network instead of --model: a JSON description of its layers (docs/networks.md; the Python "
            "module writes it), given inline; recorded in checkpoints, so --resume needs no file")
      .field([](auto& c) -> auto& { return c.network; })
      .get([](const TrainConfig& c) {
        return c.network.empty() ? std::string()
                                 : network_json(parse_network(c.network, "the network description"));
      });
  add("norm", T::Choice).metavar("N").result().clients(kEveryClient).needs(norm_needs)
      .help("models with normalisation layers: bn (BatchNorm) | gn (GroupNorm, 32 groups or fewer; independent of "
            "the batch, so micro-batching is exact with no conditions)")
      .choice_field<Kind>({{"bn", Kind::Batch}, {"gn", Kind::Group}}, [](auto& c) -> auto& { return c.norm.kind; });
  add("bn-group", T::Int).metavar("G").range(1, 1 << 24).word("batch", 0).result().clients(kEveryClient)
      .needs(bn_needs)
      .help("BatchNorm normalises over groups of G samples; micro-batches hold whole groups, so results do not "
            "depend on the micro-batch size or the budget. \"batch\": over the whole batch (PyTorch's semantics), "
            "which must then run as one micro-batch")
      .field([](auto& c) -> auto& { return c.norm.bn.group; });
  add("bn-stats", T::Choice).metavar("S").result().clients(kEveryClient).needs(bn_needs)
      .help("deferred: one running-statistics update per optimizer step from the exact whole-batch mean and "
            "variance | per-group: one update per group, as PyTorch does per forward under gradient accumulation")
      .choice_field<BnStats>({{"deferred", BnStats::Deferred}, {"per-group", BnStats::PerGroup}},
                             [](auto& c) -> auto& { return c.norm.bn.stats; });
  add("dropout", T::Float).metavar("P").range(0, 0.999999).result().clients(kEveryClient).needs(dropout_needs)
      .help("vgg11_bn: the classifier's dropout probability, in [0, 1); each sample's mask depends on (seed, step, "
            "its index in the batch), not on the micro-batch")
      .field([](auto& c) -> auto& { return c.dropout; });
  add("epochs", T::Int).metavar("N").range(0, 100000).resumable().clients(kTraining)
      .help("passes over the training set (a resumed run: in total); 0 evaluates the --load checkpoint")
      .field([](auto& c) -> auto& { return c.epochs; });
  add("batch", T::Int).metavar("B").range(1, 1 << 24).result().clients(kEveryClient)
      .help("samples per optimizer step")
      .field([](auto& c) -> auto& { return c.batch; });
  add("micro-batch", T::Int).metavar("M").range(1, 1 << 24).none_at(0).resumable().clients(kEveryClient)
      .defaults("the largest that fits --memory-budget, the whole batch where it fits")
      .help("samples per forward/backward, at most --batch; gradients of the micro-batches are accumulated, so "
            "the step equals a full-batch step")
      .field([](auto& c) -> auto& { return c.micro_batch; });
  add("optimizer", T::Choice).metavar("NAME").result().clients(kEveryClient)
      .help("sgd | adamw (torch.optim.SGD / torch.optim.AdamW semantics); sets the defaults of the others below")
      .choice_field<OptimizerKind>({{"sgd", OptimizerKind::Sgd}, {"adamw", OptimizerKind::AdamW}},
                                   [](auto& c) -> auto& { return c.optimizer.kind; })
      .set([](TrainConfig& c, const OptionValue& v) {
        c.optimizer = default_optimizer(v.text == "sgd" ? OptimizerKind::Sgd : OptimizerKind::AdamW);
      });
  add("lr", T::Float).metavar("X").range(1e-12, 1e6).result().clients(kEveryClient)
      .defaults("0.05 for sgd, 0.001 for adamw")
      .help("learning rate")
      .field([](auto& c) -> auto& { return c.optimizer.lr; });
  add("weight-decay", T::Float).metavar("X").range(0, 1e3).result().clients(kEveryClient)
      .defaults("0 for sgd, 0.01 for adamw")
      .help("sgd: L2 term added to the gradient; adamw: decoupled, p *= 1 - lr * X")
      .field([](auto& c) -> auto& { return c.optimizer.weight_decay; });
  add("momentum", T::Float).metavar("X").range(0, 0.999999).result().clients(kEveryClient).needs(sgd_needs)
      .help("sgd: momentum in [0, 1)")
      .field([](auto& c) -> auto& { return c.optimizer.momentum; });
  add("nesterov", T::Bool).bare().result().clients(kEveryClient).needs(sgd_needs)
      .help("sgd: Nesterov momentum (needs --momentum > 0)")
      .field([](auto& c) -> auto& { return c.optimizer.nesterov; });
  add("beta1", T::Float).metavar("X").range(0, 0.999999).result().clients(kEveryClient).needs(adamw_needs)
      .help("adamw: first-moment decay in [0, 1)")
      .field([](auto& c) -> auto& { return c.optimizer.beta1; });
  add("beta2", T::Float).metavar("X").range(0, 0.999999).result().clients(kEveryClient).needs(adamw_needs)
      .help("adamw: second-moment decay in [0, 1)")
      .field([](auto& c) -> auto& { return c.optimizer.beta2; });
  add("eps", T::Float).metavar("X").range(1e-30, 1).result().clients(kEveryClient).needs(adamw_needs)
      .help("adamw: term added to the denominator, > 0")
      .field([](auto& c) -> auto& { return c.optimizer.eps; });
  using Sched = LrSchedule::Kind;
  add("lr-schedule", T::Choice).metavar("S").result().clients(kEveryClient)
      .help("constant | step | cosine, evaluated once per optimizer step: step multiplies the lr by --lr-gamma "
            "every --lr-step-size optimizer steps (PyTorch StepLR counted in steps); cosine anneals it to 0 over "
            "the run's optimizer steps (CosineAnnealingLR, T_max = all steps, resumed ones included)")
      .choice_field<Sched>({{"constant", Sched::Constant}, {"step", Sched::Step}, {"cosine", Sched::Cosine}},
                           [](auto& c) -> auto& { return c.optimizer.schedule.kind; });
  add("lr-step-size", T::Int).metavar("N").range(1, 1LL << 40).result().clients(kEveryClient).needs(step_needs)
      .help("step: optimizer steps between decays")
      .field([](auto& c) -> auto& { return c.optimizer.schedule.step_size; });
  add("lr-gamma", T::Float).metavar("X").range(1e-12, 1).result().clients(kEveryClient).needs(step_needs)
      .help("step: factor per decay in (0, 1]")
      .field([](auto& c) -> auto& { return c.optimizer.schedule.gamma; });
  add("warmup-steps", T::Int).metavar("N").range(0, 1LL << 40).result().clients(kEveryClient)
      .help("linear warmup: step k < N runs at lr * (k + 1) / N, times the schedule (PyTorch LinearLR, "
            "start_factor 1/N, total_iters N - 1; 0: none)")
      .field([](auto& c) -> auto& { return c.optimizer.schedule.warmup_steps; });
  add("device", T::Choice).metavar("D").choices({"cpu", "cuda"}).resumable().clients(kEveryClient)
      .defaults("cuda when a GPU is usable, else cpu")
      .help("cpu | cuda")
      .set([](TrainConfig& c, const OptionValue& v) {
        Device d;
        if (device_named(v.text, d)) c.device = d;
      })
      .get([](const TrainConfig& c) { return c.device ? std::string(device_name(*c.device)) : std::string(); });
  add("threads", T::Int).metavar("N").range(1, 1024).resumable().clients(kEveryClient)
      .help("CPU threads for all kernels")
      .field([](auto& c) -> auto& { return c.threads; });
  add("seed", T::Int).metavar("N").range(0, 1LL << 62).result().clients(kEveryClient)
      .help("seed for initialisation, shuffling, augmentation, dropout and synthetic data")
      .field([](auto& c) -> auto& { return c.seed; })
      .set([](TrainConfig& c, const OptionValue& v) { c.seed = c.data.seed = static_cast<uint64_t>(v.integer); });
  add("dataset", T::Choice).metavar("NAME").choices({"fashion-mnist", "cifar10", "synthetic", "npy"}).result()
      .help("fashion-mnist | cifar10 (the binary version: data_batch_1..5.bin, test_batch.bin in --data, which it "
            "needs) | synthetic (learnable generated images, 4096 train + 1024 test unless --limit-*) | npy (your "
            "own data, memory-mapped from --data DIR: x.npy, images N x C x H x W of uint8 (x/255 mapped to "
            "[-1, 1]) or float32 (taken as is), C order, and y.npy, integer labels 0..K-1; tested on x_test.npy + "
            "y_test.npy if there, else on the last tenth of x.npy, which then does not train)")
      .field([](auto& c) -> auto& { return c.data.dataset; });
  add("augment", T::Choice).metavar("MODE").result().clients(kEveryClient)
      .help("none | crop-flip (random crop with 4-pixel zero padding, horizontal flip, on the training set, seeded)")
      .choice_field<bool>({{"none", false}, {"crop-flip", true}}, [](auto& c) -> auto& { return c.augment; });
  add("shuffle", T::Bool).metavar("on|off").result().clients(kEveryClient)
      .help("on: each epoch's training samples in a fresh order drawn from (seed, epoch), as PyTorch's "
            "DataLoader(shuffle=True); off: the data's own order in every epoch (shuffle=False)")
      .field([](auto& c) -> auto& { return c.shuffle; });
  add("input", T::Shape).metavar("CxHxW").result().clients(kPlanned).needs(synthetic_needs)
      .help("synthetic: image shape, e.g. 3x224x224")
      .set([](TrainConfig& c, const OptionValue& v) {
        c.data.channels = static_cast<int>(v.ints[0]);
        c.data.height = static_cast<int>(v.ints[1]);
        c.data.width = static_cast<int>(v.ints[2]);
      })
      .get([](const TrainConfig& c) {
        return std::to_string(c.data.channels) + "x" + std::to_string(c.data.height) + "x" +
               std::to_string(c.data.width);
      });
  add("classes", T::Int).metavar("K").range(2, 100000).result().clients(kPlanned).needs(synthetic_needs)
      .help("synthetic: number of classes")
      .field([](auto& c) -> auto& { return c.data.classes; });
  add("data", T::Path).metavar("DIR").resumable()
      .defaults("for Fashion-MNIST: $CRUMB_DATA, else /usr/share/datasets/fashion-mnist")
      .help("folder with the dataset's files")
      .field([](auto& c) -> auto& { return c.data.dir; });
  add("limit-train", T::Int).metavar("N").range(1, 1 << 30).none_at(0).result().defaults("all")
      .help("use only the first N training samples")
      .field([](auto& c) -> auto& { return c.data.limit_train; });
  add("limit-test", T::Int).metavar("N").range(1, 1 << 30).none_at(0).resumable().defaults("all")
      .help("use only the first N test samples")
      .field([](auto& c) -> auto& { return c.data.limit_test; });
  add("memory-budget", T::Size).metavar("SIZE").none_at(0).resumable().clients(kEveryClient)
      .defaults("4GiB on the CPU, 95% of the free GPU memory on CUDA")
      .help("memory for persistent state + arena + workspace + input staging, e.g. 64MiB, 1.5GiB; the largest "
            "micro-batch that fits is used")
      .field([](auto& c) -> auto& { return c.memory_budget; });
  std::vector<std::pair<std::string, Strategy>> strategies;
  for (Strategy s : {Strategy::Auto, Strategy::MicroBatch, Strategy::Swap, Strategy::Recompute, Strategy::None})
    strategies.push_back({strategy_name(s), s});
  add("strategy", T::Choice).metavar("S").resumable().clients(kEveryClient)
      .help("how to fit the budget: auto | micro-batch | swap | recompute | none. auto: the largest micro-batch "
            "that fits in memory; where even the smallest allowed one, or --micro-batch, does not fit, saved "
            "activations are swapped to host memory or recomputed in the backward pass, each where the cost "
            "model, fed by kernel times and copy bandwidth measured here, predicts it is cheaper. swap / "
            "recompute: only that technique, at the largest micro-batch it fits. none: the whole batch in memory. "
            "Results are the same bits either way")
      .choice_field<Strategy>(strategies, [](auto& c) -> auto& { return c.strategy; });
  add("save", T::Path).metavar("FILE").resumable().clients(kTraining)
      .help("write the model's state_dict to FILE (safetensors, PyTorch's names: torchvision loads it strictly) and "
            "the optimizer state to FILE.optimizer, at every epoch end, on SIGINT/SIGTERM (after the step in "
            "progress) and after training; each write replaces the previous one atomically. The folder is checked "
            "first")
      .field([](auto& c) -> auto& { return c.save; });
  add("save-every", T::Int).metavar("N").range(1, 1LL << 40).none_at(0).resumable().clients(kTraining)
      .needs([](const TrainConfig& c) { return c.save.empty() ? "--save" : ""; })
      .help("also write --save every N optimizer steps")
      .field([](auto& c) -> auto& { return c.save_every; });
  add("resume", T::Path).metavar("FILE").resumable().clients(kTraining)
      .help("continue the run saved in FILE (and FILE.optimizer) exactly where it stopped: epoch and batch, data "
            "order, optimizer state, schedule, BatchNorm state and every setting it recorded; --epochs N means N "
            "epochs in total. Bit-identical to an uninterrupted run on the CPU with the same --threads and "
            "micro-batch size")
      .field([](auto& c) -> auto& { return c.resume; });
  add("fresh-optimizer", T::Bool).bare().resumable().clients(kTraining)
      .needs([](const TrainConfig& c) { return c.resume.empty() ? "--resume" : ""; })
      .help("with --resume: continue without FILE.optimizer (missing or from another save), starting the optimizer "
            "afresh (zero momentum, the schedule from its first step); without it a resume refuses to lose the "
            "optimizer's state")
      .field([](auto& c) -> auto& { return c.fresh_optimizer; });
  add("load", T::Path).metavar("FILE").clients(kTraining)
      .help("start from the weights + optimizer state in FILE (shapes must match the model)")
      .field([](auto& c) -> auto& { return c.load; });
  add("log", T::Path).metavar("FILE").resumable().clients(kTraining)
      .help("write a JSON line per optimizer step (loss, lr, samples/s, micro-batch, arena, max RSS) and per epoch "
            "(train/test loss, test accuracy) to FILE, flushed as the run goes (JSON Lines: one object per line, "
            "for plots and tail -f); a resumed run appends to it, after cutting off the lines of the steps it "
            "trains again; a write that fails warns once and the run goes on without the log")
      .field([](auto& c) -> auto& { return c.log; });
  std::vector<std::pair<std::string, Precision>> precisions;
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16, Precision::FP64})
    precisions.push_back({precision_name(p), p});
  add("precision", T::Choice).metavar("P").result().clients(kEveryClient)
      .help("fp32 | tf32 | bf16 | fp16 | fp64. tf32: CUDA matrix products and convolutions round float32 operands "
            "to TF32 on tensor cores (faster, ~1e-3 relative error per product; PyTorch's default for "
            "convolutions); the CPU computes float32. bf16, fp16: mixed precision as torch.autocast: activations "
            "and their gradients are 16-bit (half the arena), convolutions and linear layers read 16-bit weight "
            "copies, and weights, their gradients (accumulated over micro-batches in float32), optimizer state, "
            "BatchNorm statistics and the loss stay float32; checkpoints hold the float32 weights. fp16 scales the "
            "loss dynamically (docs/precision.md); bf16 needs a GPU of compute capability >= 8.0. fp64: everything "
            "in float64 (inputs, activations, weights, gradients, optimizer state, checkpoints), on the CPU only: "
            "a reference mode for comparing with another engine's float64 run, with about twice fp32's memory and "
            "time")
      .choice_field<Precision>(precisions, [](auto& c) -> auto& { return c.precision; });
  // An alias kept for the command line (and the checkpoints that recorded it); not a result of its own:
  // --precision holds it.
  add("tf32", T::Bool).bare()
      .help("the same as --precision tf32")
      .set([](TrainConfig& c, const OptionValue& v) {
        if (v.on) c.precision = Precision::TF32;
      })
      .get([](const TrainConfig& c) { return c.precision == Precision::TF32 ? "on" : "off"; });
  add("loss-scale", T::Float).metavar("S").range(1, 0x1p64).result().clients(kEveryClient).needs(fp16_needs)
      .help("fp16: the initial loss scale, a power of two")
      .field([](auto& c) -> auto& { return c.loss_scale.init; })
      .set([](TrainConfig& c, const OptionValue& v) {
        c.loss_scale.init = v.number;
        c.loss_scale.validate();
      });
  add("loss-scale-growth-interval", T::Int).metavar("N").range(1, 1 << 30).result().clients(kEveryClient)
      .needs(fp16_needs)
      .help("fp16: clean steps in a row before the scale doubles")
      .field([](auto& c) -> auto& { return c.loss_scale.growth_interval; });
  using CL = ChannelsLast;
  add("channels-last", T::Choice).metavar("on|off|auto").resumable().clients(kEveryClient)
      .help("run convolutions, normalisation and pooling in NHWC (channels_last), with conversions where the "
            "network leaves them (auto: on for bf16 and fp16 on CUDA, where cuDNN's tensor-core kernels want NHWC; "
            "off otherwise). The result is the same up to float32 summation order; checkpoints stay NCHW")
      .choice_field<CL>({{"on", CL::On}, {"off", CL::Off}, {"auto", CL::Auto}},
                        [](auto& c) -> auto& { return c.channels_last; });
  add("cuda-graphs", T::Bool).metavar("on|off").resumable().clients(kEveryClient)
      .help("record each micro-batch's work once and replay it as one CUDA graph")
      .field([](auto& c) -> auto& { return c.cuda_graphs; });
  add("fuse", T::Bool).metavar("on|off").resumable().clients(kEveryClient)
      .help("fuse chains of ops into one op each after autograd: BatchNorm or GroupNorm (+ the residual add) + "
            "ReLU, forward and backward; --explain names the fused steps. The result is the same up to float32 "
            "rounding order")
      .field([](auto& c) -> auto& { return c.fuse; });
  using CA = Graph::ConvAlgo;
  add("conv-algo", T::Choice).metavar("measure|direct|winograd").resumable().clients(kTrainFlag)
      .help("CPU: how stride-1 3x3 convolutions run their forward and data-gradient passes: direct (the default) "
            "or winograd (F(2x2,3x3): 16 multiplies per 2x2 outputs instead of 36, rounding within about 1e-6 of "
            "the sum of |terms| of each output); measure times both once per layer shape and runs the faster, "
            "as torch.backends.cudnn.benchmark (a checkpoint records the choices and a resumed run keeps them, "
            "but another fresh run may measure differently)")
      .choice_field<CA>({{"measure", CA::Measure}, {"direct", CA::Direct}, {"winograd", CA::Winograd}},
                        [](auto& c) -> auto& { return c.conv_algo; });
  add("deterministic", T::Bool).bare().resumable().clients(kEveryClient)
      .help("CUDA: only convolution algorithms that give the same bits on every run, as "
            "torch.backends.cudnn.deterministic (some of cuDNN's fastest backward ones add with atomics); the CPU "
            "is deterministic without it")
      .field([](auto& c) -> auto& { return c.deterministic; });
  add("bucket-cap", T::Size).metavar("SIZE").resumable().clients(kTraining)
      .help("under mpirun: gradient bytes per all-reduce bucket (PyTorch DDP's bucket_cap_mb; the first bucket, the "
            "last layers, closes at 1MiB)")
      .field([](auto& c) -> auto& { return c.bucket_cap; });
  add("dist-timeout", T::Float).metavar("S").range(1e-3, 1e6).resumable().clients(kTraining)
      .help("under mpirun: seconds a rank waits for the others in a collective before it stops every rank with an "
            "error")
      .field([](auto& c) -> auto& { return c.dist_timeout; });

  std::vector<Option> out;
  for (const Row& r : rows) out.push_back(r.option());
  return out;
}

std::string value_shown(const Setting& s) {
  // A description is long: it is shown by its network's name.
  if (s.name() == "network") return "network '" + parse_network(s.value, "--network").name + "' (another description)";
  return s.option->type == OptionType::Bool && s.option->bare ? (s.value == "on" ? "(set)" : "(not set)") : s.value;
}

const Setting* find_setting(const Settings& settings, const std::string& name) {
  const Setting* found = nullptr;
  for (const Setting& s : settings)
    if (s.name() == name) found = &s;
  return found;
}

Settings without(const Settings& settings, const std::string& name) {
  Settings out;
  for (const Setting& s : settings)
    if (s.name() != name) out.push_back(s);
  return out;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

const char* option_type_name(OptionType t) {
  switch (t) {
    case OptionType::Int: return "int";
    case OptionType::Float: return "float";
    case OptionType::Size: return "size";
    case OptionType::Text: return "text";
    case OptionType::Path: return "path";
    case OptionType::Choice: return "choice";
    case OptionType::Bool: return "bool";
    case OptionType::IntList: return "ints";
    case OptionType::Shape: return "shape";
  }
  return "?";
}

std::string Option::default_value() const {
  if (!default_help.empty() || !get) return "";
  return get(TrainConfig());
}

std::string Option::default_text() const {
  if (!default_help.empty()) return "(default " + default_help + ")";
  const std::string d = default_value();
  if (d.empty() || (type == OptionType::Bool && bare && d == "off")) return "";
  return "(default " + d + ")";
}

const std::vector<Option>& run_options() {
  static const std::vector<Option> table = engine_rows();
  return table;
}

const Option* find_option(const std::vector<Option>& table, const std::string& name) {
  for (const Option& o : table)
    if (o.name == name) return &o;
  return nullptr;
}

std::vector<std::string> closest_names(const std::vector<Option>& table, const std::string& name) {
  // Within a third of the name's length (at least 1, at most 3 edits), nearest first.
  const std::size_t limit = std::min<std::size_t>(3, std::max<std::size_t>(1, name.size() / 3));
  std::vector<std::pair<std::size_t, std::string>> near;
  for (const Option& o : table) {
    const std::size_t d = edit_distance(name, o.name);
    if (d <= limit) near.push_back({d, o.name});
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& [d, n] : near) out.push_back(n);
  return out;
}

OptionValue parse_value(const Option& o, const std::string& s) {
  const std::string& name = o.name;
  CRUMB_CHECK(!s.empty(), "--", name, " needs a value, got an empty one");
  OptionValue v;
  v.text = s;
  switch (o.type) {
    case OptionType::Int:
      if (!o.choices.empty() && s == o.choices[0]) v.integer = o.word_value;
      else v.integer = parse_int(name, s, static_cast<long long>(o.lo), static_cast<long long>(o.hi));
      break;
    case OptionType::Float: v.number = parse_float(name, s, o.lo, o.hi); break;
    case OptionType::Size:
      try {
        v.integer = static_cast<long long>(parse_bytes(s));
      } catch (const Error& e) {
        CRUMB_FAIL("--", name, ": ", e.what());
      }
      break;
    case OptionType::Text: break;
    case OptionType::Path: v.text = std::filesystem::absolute(s).lexically_normal().string(); break;
    case OptionType::Choice:
      CRUMB_CHECK(std::find(o.choices.begin(), o.choices.end(), s) != o.choices.end(), "--", name, " must be ",
                  listed(o.choices), ", got '", s, "'");
      break;
    case OptionType::Bool:
      CRUMB_CHECK(s == "on" || s == "off", "--", name, " must be on or off, got '", s, "'");
      v.on = s == "on";
      break;
    case OptionType::IntList:
      for (std::size_t start = 0, comma; start <= s.size(); start = comma + 1) {
        comma = std::min(s.find(',', start), s.size());
        v.ints.push_back(parse_int(name, s.substr(start, comma - start), static_cast<long long>(o.lo),
                                   static_cast<long long>(o.hi)));
      }
      break;
    case OptionType::Shape: {
      // Each size digits only and range-checked: sscanf's %d would wrap 4294967297 to 1.
      const std::size_t x1 = s.find('x'), x2 = x1 == std::string::npos ? x1 : s.find('x', x1 + 1);
      CRUMB_CHECK(x2 != std::string::npos && s.find('x', x2 + 1) == std::string::npos, "--", name,
                  " must be CxHxW with positive sizes, e.g. 3x32x32, got '", s, "'");
      v.ints = {parse_int(name + " channels", s.substr(0, x1), 1, 4096),
                parse_int(name + " height", s.substr(x1 + 1, x2 - x1 - 1), 1, 65536),
                parse_int(name + " width", s.substr(x2 + 1), 1, 65536)};
      break;
    }
  }
  return v;
}

Setting setting(const Option& o, const std::string& value) {
  OptionValue v = parse_value(o, value);
  // A network goes into the record as its description, canonical, so a reformatted one is the same run.
  if (o.name == "network") v.text = network_json(parse_network(value, "--network"));
  return {&o, v.text};
}

TrainConfig configure(const Settings& given) {
  TrainConfig c;
  auto is_given = [&](const char* name) { return find_setting(given, name) != nullptr; };
  CRUMB_CHECK(!is_given("model") || !is_given("network"),
              "--model and --network both give the model: give one of them");
  CRUMB_CHECK(!is_given("tf32") || !is_given("precision"), "--tf32 is --precision tf32: give one of them");
  // In the table's order, whatever the order given: --optimizer sets the defaults of the options after it.
  for (const Option& row : run_options()) {
    const Setting* s = find_setting(given, row.name);
    if (s && s->option->set) s->option->set(c, parse_value(*s->option, s->value));
  }
  if (!c.network.empty()) c.model = parse_network(c.network, "--network").name;
  // Given, an option must apply, even at its default value: --momentum 0.9 with --optimizer adamw is a mistake.
  for (const Setting& s : given) {
    if (!s.option->needs) continue;
    const std::string needs = s.option->needs(c);
    CRUMB_CHECK(needs.empty(), "--", s.name(), " needs ", needs);
  }
  c.validate();
  c.record = {{"train.args", record_of(given)}};
  return c;
}

void TrainConfig::validate() const {
  // An option that does not apply must keep its default: TrainConfig's, or the chosen optimizer's (a program
  // that sets only optimizer.kind = AdamW keeps SGD's momentum, which AdamW ignores).
  const TrainConfig defaults;
  TrainConfig kind_defaults;
  kind_defaults.optimizer = default_optimizer(optimizer.kind);
  for (const Option& o : run_options()) {
    if (!o.needs || !o.get) continue;
    const std::string needs = o.needs(*this);
    const std::string value = o.get(*this);
    CRUMB_CHECK(needs.empty() || value == o.get(defaults) || value == o.get(kind_defaults), "--", o.name, " needs ",
                needs);
  }
  CRUMB_CHECK(micro_batch <= batch, "--micro-batch ", micro_batch, " is larger than --batch ", batch);
  CRUMB_CHECK(!optimizer.nesterov || optimizer.momentum > 0, "--nesterov needs --momentum > 0");
  CRUMB_CHECK(data.dataset != "synthetic" || data.dir.empty(), "--dataset synthetic reads no files: drop --data");
  CRUMB_CHECK(data.dataset != "cifar10" || !data.dir.empty(),
              "--dataset cifar10 needs --data DIR, the folder of the CIFAR-10 binary version");
  CRUMB_CHECK(data.dataset != "npy" || !data.dir.empty(), "--dataset npy needs --data DIR, the folder of x.npy and y.npy");
  if (precision == Precision::FP16) loss_scale.validate();
  if (device) check_precision_device(precision, *device);
}

std::string result_settings(const TrainConfig& c) {
  json::ObjectWriter w;
  for (const Option& o : run_options()) {
    // One that does not apply holds its default (validate): left out, as it changes nothing.
    if (!o.result || (o.needs && !o.needs(c).empty())) continue;
    w.string(o.name, o.get(c));
  }
  // What no option sets (a C++ caller's).
  return w.boolean("drop-last", c.drop_last).integer("gn-groups", c.norm.gn_groups).str();
}

Settings resume_settings(const std::vector<Option>& table, const Settings& recorded, const Settings& given) {
  // The starting weights came from --load; they now come from --resume.
  const Settings run = without(without(recorded, "load"), "resume");
  const std::string settings = result_settings(configure(run));
  std::string may_set;
  for (const Option& o : table)
    if (o.resumable && (o.clients & kTrainFlag) && o.name != "resume" && o.name != "help")
      may_set += (may_set.empty() ? "--" : ", --") + o.name;
  Settings merged = run;
  for (const Setting& s : given) {
    if (s.option->resumable) {
      merged = without(merged, s.name());
      merged.push_back(s);
      continue;
    }
    const Setting* was = find_setting(recorded, s.name());
    if (s.name() == "load") {
      CRUMB_CHECK(was && was->value == s.value, "--resume continues a run from its checkpoint: drop --load");
      continue;
    }
    // The original command line with --resume added is fine, and so is any option given as the run recorded
    // it: one that leaves the run's result as recorded is accepted; one that would change it is an error.
    // (--model and --network give the same thing: either replaces the other.)
    Settings with = without(run, s.name());
    if (s.name() == "model" || s.name() == "network") with = without(with, s.name() == "model" ? "network" : "model");
    with.push_back(s);
    bool same = false;
    try {
      same = result_settings(configure(with)) == settings;
    } catch (const Error& e) {
      // About the option itself (--beta1 on an SGD run: "needs --optimizer adamw"), that is the message; about
      // another (--precision bf16 leaves the run's --loss-scale without fp16), the option changes the run.
      if (std::string(e.what()).rfind("--" + s.name() + " ", 0) == 0) throw;
    }
    CRUMB_CHECK(same, "--", s.name(),
                " cannot change when resuming: the run recorded ", was ? value_shown(*was) : "its default", ", given ",
                value_shown(s), " (a resumed run continues with its recorded settings; it may set ", may_set, ")");
  }
  return merged;
}

std::string record_of(const Settings& settings) {
  std::string out;
  for (const Setting& s : settings) {
    const bool bare = s.option->type == OptionType::Bool && s.option->bare;
    if (bare && s.value == "off") continue;
    const std::string arg = "--" + s.name() + (bare ? "" : "=" + s.value);
    if (!out.empty()) out += ' ';
    // Percent-encoded: the separator, controls and the bytes of a value that are not UTF-8 (a Linux path may
    // hold any), so that the record is the UTF-8 a checkpoint header must be and decodes to the same bytes.
    for (std::size_t i = 0; i < arg.size(); ++i) {
      const auto ch = static_cast<unsigned char>(arg[i]);
      const std::size_t len = ch < 0x80 ? 1 : ch >= 0xf0 ? 4 : ch >= 0xe0 ? 3 : 2;
      if (ch >= 0x80 && i + len <= arg.size() && json::valid_utf8(std::string_view(arg).substr(i, len))) {
        out.append(arg, i, len);
        i += len - 1;
      } else if (ch == '%' || ch == ' ' || ch < 0x20 || ch >= 0x7f) {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", ch);
        out += hex;
      } else {
        out += static_cast<char>(ch);
      }
    }
  }
  return out;
}

Settings settings_of_record(const std::vector<Option>& table, const std::string& text, const std::string& path) {
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
  Settings out;
  for (const std::string& a : args) {
    CRUMB_CHECK(a.rfind("--", 0) == 0, path, ": damaged \"train.args\" in its metadata ('", a, "')");
    const std::size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const Option* o = find_option(table, name);
    CRUMB_CHECK(o, path, " records --", name, ", which this version of Crumb does not know");
    const bool bare = o->type == OptionType::Bool && o->bare;
    CRUMB_CHECK(bare == (eq == std::string::npos), path, ": damaged \"train.args\" in its metadata ('", a, "')");
    try {
      out.push_back(setting(*o, bare ? "on" : a.substr(eq + 1)));
    } catch (const Error& e) {
      CRUMB_FAIL(path, " records a value this version refuses: ", e.what());
    }
  }
  return out;
}

Settings recorded_settings(const std::vector<Option>& table, const std::string& path) {
  return settings_of_record(table, recorded_value(checkpoint_metadata(path), "train.args", path), path);
}

Settings resumed(const std::vector<Option>& table, const Settings& given) {
  const Setting* resume = find_setting(given, "resume");
  return resume ? resume_settings(table, recorded_settings(table, resume->value), given) : given;
}

}  // namespace crumb
