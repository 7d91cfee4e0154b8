// Configuration and planning: what a TrainConfig's fields mean (precision, optimizer defaults, device,
// budget) and the plan of a model for a batch and a budget (plan_run, plan_graph), before anything is
// allocated. Declared in engine/train/trainer.h.
#include <algorithm>
#include <limits>
#include <optional>

#include "engine/base/error.h"
#include "engine/graph/autograd.h"
#include "engine/graph/fusion.h"
#include "engine/io/checkpoint.h"
#include "engine/ops/conv2d_algo.h"
#include "engine/ops/norm.h"
#include "engine/plan/layout.h"
#include "engine/strategy/in_place.h"
#include "engine/train/network.h"
#include "engine/train/trainer.h"

namespace crumb {

void check_bn_group(const TrainConfig& c, const Graph& g, int batch, bool named) {
  if (named) {
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

namespace {

std::string describe_split(const TrainConfig& c, int batch, const RunPlan& run) {
  const StrategyPlan& p = run.strategy;
  const int m = p.plan.micro_batch;
  const bool stepping = run.graph.step_in_backward();
  const std::string how = c.micro_batch                      ? " (--micro-batch"
                          : stepping                          ? " (the whole batch: no micro-batch fits with the gradients kept"
                          : p.choice.used == "micro-batch"    ? " (largest that fits the budget"
                          : c.strategy == Strategy::None      ? " (--strategy none"
                          : c.strategy == Strategy::Auto      ? " (the smallest allowed does not fit in memory"
                                                              : " (largest that fits with --strategy " +
                                                                    std::string(strategy_name(c.strategy));
  const bool rewritten = !p.choice.swapped.empty() || !p.choice.recomputed.empty();
  return "batch " + std::to_string(batch) + " in " + std::to_string((batch + m - 1) / m) + " micro-batch(es) of " +
         std::to_string(m) + how + (rewritten ? "; " + p.choice.used + " to fit" : "") +
         (run.in_place ? "; fused normalisations keep their inputs alone, In-Place" : "") +
         (run.unfused ? "; unfused, which needs least here" : "") +
         (stepping ? "; the optimizer steps in the backward pass, the gradients in the arena" : "") +
         ")";
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
// false leaves p.graph as it was, for swapping and recomputing.
bool plan_in_place(RunPlan& p, const StrategyRequest& r) {
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
  if (!fast) return false;
  p.graph = std::move(kept);
  p.strategy = std::move(*fast);
  return true;
}

// Swapping and recomputing where a fused plan does not fit in memory. Fused steps are coarser (a fused
// backward step holds at once what three steps held in turn), and In-Place changes what recomputing can
// drop, so which of the fused graph, its In-Place form and the unfused graph needs least depends on the
// model and the strategy (docs/memory.md, Fusion). The first of them, in that order (fewest passes
// first), whose least budget (from sizes alone) meets the budget is planned; where none does, the error is
// the one of the graph that needs least.
void plan_fused_strategy(RunPlan& p, Graph unfused, const StrategyRequest& r) {
  Graph lean = p.graph;
  recompute_in_place(lean);
  struct Variant {
    Graph* graph;
    bool in_place, fused;
    const char* note;
  };
  const Variant variants[] = {
      {&p.graph, false, true, ""},
      {&lean, true, true, " (these with the fused normalisations keeping their inputs alone, In-Place)"},
      {&unfused, false, false, " (these for the unfused graph, which needs least here: fused steps are coarser)"}};
  const Variant* least = nullptr;
  std::size_t least_bytes = 0;
  for (const Variant& v : variants) {
    const std::size_t bytes = least_budget(*v.graph, r);
    if (bytes <= r.budget) {
      Graph g = std::move(*v.graph);
      p.strategy = plan_strategy(g, r);
      p.graph = std::move(g);
      p.in_place = v.in_place;
      p.unfused = !v.fused;
      return;
    }
    if (!least || bytes < least_bytes) least = &v, least_bytes = bytes;
  }
  try {
    plan_strategy(*least->graph, r);
  } catch (const Error& e) {
    CRUMB_FAIL(e.what(), least->note);
  }
  CRUMB_FAIL("the memory strategy met a budget its least budget said it could not");
}

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
    case Precision::FP64: return "fp64";
    default: return "fp32";
  }
}

bool precision_named(const std::string& name, Precision& out) {
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16, Precision::FP64})
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
  switch (p) {
    case Precision::BF16: return DType::BF16;
    case Precision::FP16: return DType::F16;
    case Precision::FP64: return DType::F64;
    default: return DType::F32;
  }
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

void check_precision_device(Precision p, Device device) {
  CRUMB_CHECK(p != Precision::FP64 || device == Device::CPU, "--precision fp64 runs on the CPU only (a float64 ",
              "reference mode, for comparing numbers with another engine's float64 run), not on ", device_name(device),
              ": use --device cpu, or fp32, tf32, bf16 or fp16 on ", device_name(device));
}

Device pick_device(const TrainConfig& c) {
  if (!c.device) return c.precision == Precision::FP64 ? Device::CPU : preferred_device();
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

// The graph a run trains, with what planning it needs besides.
struct TrainingGraph {
  Graph graph;
  Graph unfused;       // fused: the graph before fusion, which swapping and recomputing may fall back on
  bool fused = false;  // fusion ran (a forward graph, --fuse on)
};

// c's rewrites on a forward graph (backward pass, fusion, channels-last), or a graph with its backward pass
// planned as given; checked against the device and the batch.
TrainingGraph training_graph(const TrainConfig& c, Graph model, int batch, Device device, bool named) {
  TrainingGraph t;
  Graph& g = t.graph;
  g = std::move(model);
  bool as_given = false;
  for (NodeId n = 0; n < g.num_nodes(); ++n) as_given = as_given || g.node(n).backward;
  if (c.precision == Precision::FP16) c.loss_scale.validate();
  check_precision_device(c.precision, device);
  const std::vector<DType> runs = backend(device).float_dtypes();
  CRUMB_CHECK(std::find(runs.begin(), runs.end(), activation_dtype(c.precision)) != runs.end(), "--precision ",
              precision_name(c.precision), ": ", backend(device).description(), " has no ",
              dtype_name(activation_dtype(c.precision)), " arithmetic (bf16 needs compute capability 8.0 or newer); ",
              "use --precision fp16");
  // A graph planned as given computes in its own dtype; a forward graph gets cfg's.
  CRUMB_CHECK(as_given || g.float_dtype() == activation_dtype(c.precision), "the model's graph computes in ",
              dtype_name(g.float_dtype()), " but --precision ", precision_name(c.precision), " trains in ",
              dtype_name(activation_dtype(c.precision)), ": build the graph in that dtype");
  CRUMB_CHECK(std::find(runs.begin(), runs.end(), g.float_dtype()) != runs.end(), "the model's graph computes in ",
              dtype_name(g.float_dtype()), ", which ", backend(device).description(), " has no arithmetic for");
  if (!as_given) {
    g.set_tf32(c.precision == Precision::TF32);
    g.set_deterministic(c.deterministic);
    g.set_conv_algo(c.conv_algo);
    // A resumed run computes with the convolution algorithms the run it continues measured.
    if (!c.resume.empty())
      for (const auto& [key, value] : checkpoint_metadata(c.resume))
        if (key == kConvChoicesKey) set_conv_choices(g, value, c.resume);
    build_backward(g);
    if (c.fuse) {
      t.unfused = g;
      fuse(g);
      t.fused = true;
    }
    if (uses_channels_last(c, device)) {
      to_channels_last(g);
      if (t.fused) to_channels_last(t.unfused);
    }
  }
  check_bn_group(c, g, batch, named);
  return t;
}

// The registered model c.model, or c.network's, for inputs of `shape`.
Graph model_graph(const TrainConfig& c, const data::DataShape& shape) {
  const models::ModelSpec spec(shape.channels, shape.height, shape.width, shape.classes, c.norm, c.dropout);
  if (!c.network.empty()) return build_network(c.network, spec, activation_dtype(c.precision));
  return models::build(c.model, spec, activation_dtype(c.precision));
}

// Whether t's optimizer may step in the backward pass (Graph::step_in_backward) for c at `batch` over
// `ranks` processes: one process, no fp16 loss scaling, no --micro-batch below the batch, and a gradient
// for every parameter.
bool may_step_in_backward(const TrainConfig& c, const Graph& g, int batch, int ranks) {
  if (ranks != 1 || c.precision == Precision::FP16 || (c.micro_batch && c.micro_batch < batch)) return false;
  std::vector<bool> written(g.num_values(), false);
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    for (ValueId v : g.node(i).out) written[v] = true;
  for (ValueId p : g.params())
    if (g.value(p).grad < 0 || !written[g.value(p).grad]) return false;
  return true;
}

// Whether g's batch runs as one micro-batch whatever the budget: a forced micro-batch of the batch or more,
// or BatchNorm groups that hold the whole batch.
bool whole_batch_anyway(const Graph& g, int batch, int micro_batch) {
  const int group = micro_batch_multiple(g);
  return micro_batch >= batch || group == 0 || group >= batch;
}

StrategyRequest request_for(const TrainConfig& c, const Graph& g, int batch, Device device, int micro_batch) {
  StrategyRequest r;
  r.strategy = c.strategy;
  r.batch = batch;
  r.budget = budget_of(c, device);
  // Gradients in the arena are not accumulated over micro-batches: the batch runs as one (the only size
  // allowed anyway where BatchNorm's groups hold the whole batch).
  r.micro_batch = g.step_in_backward() && !whole_batch_anyway(g, batch, micro_batch) ? batch : micro_batch;
  r.optimizer = c.optimizer;
  r.device = device;
  return r;
}

// The least budget any plan of t meets (a fused plan weighs its In-Place form and the unfused graph too).
std::size_t least_of(const TrainingGraph& t, const StrategyRequest& r) {
  std::size_t least = least_budget(t.graph, r);
  if (!t.fused) return least;
  Graph lean = t.graph;
  recompute_in_place(lean);
  return std::min({least, least_budget(lean, r), least_budget(t.unfused, r)});
}

RunPlan plan_training_graph(const TrainConfig& c, TrainingGraph t, int batch, Device device, int micro_batch) {
  RunPlan p;
  const StrategyRequest r = request_for(c, t.graph, batch, device, micro_batch);
  p.graph = std::move(t.graph);
  p.device = device;
  p.budget = r.budget;
  p.batch = batch;
  if (!t.fused) p.strategy = plan_strategy(p.graph, r);
  else if (!plan_in_place(p, r)) plan_fused_strategy(p, std::move(t.unfused), r);
  p.split = describe_split(c, batch, p);
  return p;
}

// plan_graph's work; named: `model` is the registered model c.model (whose BatchNorm groups c.norm sets).
// Where no plan meets the budget, the last memory technique: the whole batch in one micro-batch with the
// optimizer stepping in the backward pass, whose gradients leave the persistent state.
RunPlan plan_model(const TrainConfig& c, Graph model, int batch, Device device, bool named, int ranks) {
  TrainingGraph t = training_graph(c, std::move(model), batch, device, named);
  if (!may_step_in_backward(c, t.graph, batch, ranks)) return plan_training_graph(c, std::move(t), batch, device, c.micro_batch);
  TrainingGraph stepping = t;
  try {
    return plan_training_graph(c, std::move(t), batch, device, c.micro_batch);
  } catch (const Error& micro_batching) {
    auto set_stepping = [&](bool on) {
      stepping.graph.set_step_in_backward(on);
      stepping.unfused.set_step_in_backward(on);
    };
    auto least = [&] { return least_of(stepping, request_for(c, stepping.graph, batch, device, c.micro_batch)); };
    set_stepping(true);
    // The budget's error is the one for the smallest micro-batch the run could take: this plan's where that
    // is the whole batch anyway; else micro-batching's, naming this plan's least where it is lower (the
    // graphs are kept for that).
    const bool whole = whole_batch_anyway(stepping.graph, batch, c.micro_batch);
    try {
      return plan_training_graph(c, whole ? std::move(stepping) : TrainingGraph(stepping), batch, device, c.micro_batch);
    } catch (const Error&) {
      if (whole) throw;
    }
    const std::size_t stepping_least = least();
    set_stepping(false);
    if (stepping_least >= least()) throw;
    CRUMB_FAIL(micro_batching.what(), "; less fits with the whole batch of ", batch,
               " as one micro-batch and the optimizer stepping in the backward pass: --memory-budget ", stepping_least);
  }
}

}  // namespace

RunPlan plan_run(const TrainConfig& c, const data::DataShape& shape, int batch, Device device, int ranks) {
  return plan_model(c, model_graph(c, shape), batch, device, c.network.empty(), ranks);
}

Frontier plan_frontier(const TrainConfig& c, const data::DataShape& shape, int batch, Device device, int micro_batch) {
  const TrainingGraph t = training_graph(c, model_graph(c, shape), batch, device, c.network.empty());
  StrategyRequest r;
  r.strategy = c.strategy;
  r.batch = batch;
  r.budget = budget_of(c, device);
  r.micro_batch = micro_batch;
  r.optimizer = c.optimizer;
  r.device = device;
  // A fused plan swaps and recomputes on the first of the fused graph, its In-Place form and the unfused
  // graph whose least budget meets the budget (plan_fused_strategy), and where none does, on the same with
  // the optimizer stepping in the backward pass (plan_model): each graph's points below the least budgets of
  // those before it.
  std::vector<std::pair<const Graph*, const char*>> variants = {{&t.graph, ""}};
  Graph lean;
  if (t.fused) {
    lean = t.graph;
    recompute_in_place(lean);
    variants.insert(variants.end(), {{&lean, "In-Place"}, {&t.unfused, "unfused"}});
  }
  const std::size_t kept = variants.size();
  std::vector<Graph> stepping(kept);
  if (may_step_in_backward(c, t.graph, batch, 1) && micro_batch >= batch)
    for (std::size_t i = 0; i < kept; ++i) {
      stepping[i] = *variants[i].first;
      stepping[i].set_step_in_backward(true);
      variants.emplace_back(&stepping[i], i == 0 ? "stepping" : i == 1 ? "In-Place, stepping" : "unfused, stepping");
    }
  if (variants.size() == 1) return memory_frontier(t.graph, r);
  // All measured at one batch (the least of their timing batches), their times aligned with the first
  // graph's (align_costs): points of graphs measured at different moments are compared. A graph stepping in
  // the backward pass runs its kept form's kernels: their times are measured once.
  int timing = std::numeric_limits<int>::max();
  for (std::size_t i = 0; i < kept; ++i) timing = std::min(timing, frontier_timing_batch(*variants[i].first, r));
  std::vector<std::optional<CostModel>> measured(kept);
  auto costs_of = [&](std::size_t i) {
    std::optional<CostModel>& m = measured[i % kept];
    if (!m) m = measure_costs(*variants[i % kept].first, timing, r.device, r.index);
    return *m;
  };
  Frontier out;
  std::size_t below = std::numeric_limits<std::size_t>::max();
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const auto& [graph, name] = variants[i];
    const std::size_t least = least_budget(*graph, r);
    if (least >= below) continue;
    CostModel costs = costs_of(i);
    if (!out.points.empty()) costs = align_costs(*graph, std::move(costs), t.graph, out.costs);
    Frontier f = memory_frontier(*graph, r, std::move(costs));
    if (out.points.empty()) {
      out = std::move(f);
    } else {
      for (FrontierPoint& p : f.points)
        if (p.total < below) out.points.push_back(std::move(p)), out.points.back().graph = name;
    }
    below = least;
  }
  std::sort(out.points.begin(), out.points.end(),
            [](const FrontierPoint& a, const FrontierPoint& b) { return a.total < b.total; });
  // Each faster than the one before it (one with more memory and no less time is no choice).
  std::vector<FrontierPoint> points;
  for (FrontierPoint& p : out.points)
    if (points.empty() || p.predicted_seconds < points.back().predicted_seconds) points.push_back(std::move(p));
  out.points = std::move(points);
  return out;
}

int share_group(const TrainConfig& c, const data::DataShape& shape) { return micro_batch_multiple(model_graph(c, shape)); }

RunPlan plan_graph(const TrainConfig& c, Graph model, int batch, Device device, int ranks) {
  return plan_model(c, std::move(model), batch, device, false, ranks);
}

}  // namespace crumb
