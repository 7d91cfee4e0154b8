#include "engine/run/executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "engine/device/backend.h"
#include "engine/base/error.h"
#include "engine/ops/swap.h"

namespace crumb {

Executor::Executor(const Graph& g, ParamStore& params, Arena& arena, int max_batch, Pass pass)
    : Executor(g, params, arena, compile_pass(g, pass, max_batch, arena.device(), arena.index())) {}

Executor::Executor(const Graph& g, ParamStore& params, Arena& arena, CompiledPass compiled)
    : g_(g),
      params_(params),
      arena_(arena),
      backend_(backend(arena.device(), arena.index())),
      compiled_(std::move(compiled)) {
  CRUMB_CHECK(&params.graph() == &g, "executor: the parameter store belongs to another graph");
  CRUMB_CHECK(params.device() == arena.device() && compiled_.device == arena.device() &&
                  params.index() == arena.index() && compiled_.index == arena.index(),
              "executor: parameters on ", device_name(params.device()), " ", params.index(), ", the arena on ",
              device_name(arena.device()), " ", arena.index(), ", the pass compiled for ", device_name(compiled_.device),
              " ", compiled_.index);
  arena_.reserve(arena_bytes());
  for (size_t s = 0; s < compiled_.plan.order.size(); ++s) {
    CompiledStep& c = compiled_.steps[s];
    if (!c.fn) continue;
    const int64_t ws = compiled_.plan.workspace_offset[s];
    steps_.push_back({static_cast<int>(s), &g.node(compiled_.plan.order[s]), c.fn, c.commit, c.state.get(), ws >= 0 ? arena_.base() + ws : nullptr,
                      compiled_.plan.step_workspace[s]});
  }
  ptr_.assign(g.num_values(), nullptr);
  bound_.assign(g.num_values(), nullptr);
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (v != g.storage_root(v) && g.value(g.storage_root(v)).kind == ValueKind::Input) input_views_.push_back(v);
  const Node& loss = g.node(g.value(g.loss()).producer);
  for (ValueId v : loss.out) {
    if (g.value(v).kind != ValueKind::Metric) continue;
    if (g.value(v).dtype == DType::F64 && loss_sum_ < 0) loss_sum_ = v;
    if (g.value(v).dtype == DType::I64 && correct_ < 0) correct_ = v;
  }
  CRUMB_CHECK(loss_sum_ >= 0, "executor: the loss op '", loss.name, "' has no F64 metric output for the loss sum");
  metric_values_.push_back(loss_sum_);
  if (correct_ >= 0) metric_values_.push_back(correct_);
  loss_metric_bytes_ = 8 * metric_values_.size();
  std::size_t metric_bytes = loss_metric_bytes_;
  for (ValueId v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(v);
    if (val.kind != ValueKind::Metric) continue;
    CRUMB_CHECK(!val.batched && dtype_size(val.dtype) == 8, "executor: metric '", val.name,
                "' must be unbatched 8-byte values");
    if (v == loss_sum_ || v == correct_) continue;
    metric_values_.push_back(v);
    metric_bytes += 8 * static_cast<std::size_t>(val.count(1));
  }
  const int index = arena.index();
  metrics_ = Buffer(metric_bytes, backend_.memory(), index);
  if (compiled_.plan.host_pool_bytes) host_pool_ = Buffer(compiled_.plan.host_pool_bytes, backend_.host_memory(), index);
  readback_ = Buffer(loss_metric_bytes_, backend_.host_memory(), index);
  if (std::any_of(steps_.begin(), steps_.end(), [](const Step& st) { return st.node->def->random; }))
    random_ = Buffer(sizeof(RandomKey), backend_.memory(), index);
  int tickets = 0;
  for (const Step& st : steps_)
    if (st.node->def == &kSwapCopy) tickets = std::max(tickets, ops::attrs<SwapAttrs>(*st.node).ticket + 1);
  if (tickets) copies_ = backend_.make_copy_queue(tickets);
  resolve();
  arena_.attach();  // last: a constructor that threw leaves the arena free to grow
}

Executor::~Executor() { arena_.detach(); }

void Executor::bind(ValueId input, const void* data) {
  CRUMB_CHECK(input >= 0 && input < g_.num_values() && g_.value(input).kind == ValueKind::Input,
              "bind: value ", input, " is not a graph input");
  bound_[input] = data;
  ptr_[input] = const_cast<void*>(data);
}

void Executor::resolve() {
  for (ValueId v = 0; v < g_.num_values(); ++v) {
    const Value& val = g_.value(v);
    if (compiled_.plan.offset[v] >= 0)
      ptr_[v] = (compiled_.plan.space[v] == MemorySpace::HostPool ? host_pool_.data() : arena_.base()) +
                compiled_.plan.offset[v];
    else if (val.kind == ValueKind::Param)  // a 16-bit Value reads the parameter's 16-bit copy
      ptr_[v] = val.dtype == params_.dtype() ? params_.device_data(v) : params_.device_copy(v);
    else if (val.kind == ValueKind::State)
      ptr_[v] = params_.device_state(v);
    else if (val.kind == ValueKind::ParamGrad && !g_.step_in_backward())  // else in the arena, or in no pass of this one
      ptr_[v] = params_.device_grad(params_.param_of_grad(v));
  }
  for (std::size_t i = 0, at = 0; i < metric_values_.size(); ++i) {
    ptr_[metric_values_[i]] = metrics_.data() + at;
    at += 8 * static_cast<std::size_t>(g_.value(metric_values_[i]).count(1));
  }
  // Views of parameters share their storage too (views of arena values have offsets, views of
  // inputs are re-pointed on every run).
  for (ValueId v = 0; v < g_.num_values(); ++v)
    if (compiled_.plan.offset[v] < 0 && g_.value(v).view_of >= 0 && g_.value(g_.storage_root(v)).kind == ValueKind::Param)
      ptr_[v] = ptr_[g_.storage_root(v)];
}

void Executor::fail_in(const Step& s, int n, const char* what) const {
  std::string inputs;
  for (ValueId v : s.node->in) {
    const Value& val = g_.value(v);
    Dims dims = val.dims;
    if (val.batched) dims.insert(dims.begin(), n);
    inputs += (inputs.empty() ? "" : ", ") + std::string(dtype_name(val.dtype)) + dims_str(dims);
  }
  CRUMB_FAIL("layer '", s.node->name, "' (", s.node->def->name, ") on ", device_name(device()), " with inputs ", inputs,
             ": ", what);
}

Executor::Results Executor::results() {
  backend_.read_back(readback_.data(), metrics_.data(), loss_metric_bytes_);
  auto host = [&](ValueId v) { return readback_.data() + (static_cast<const char*>(ptr_[v]) - metrics_.data()); };
  Results r;
  std::memcpy(&r.loss_sum, host(loss_sum_), 8);
  if (correct_ >= 0) std::memcpy(&r.correct, host(correct_), 8);
  return r;
}

void Executor::set_recording(bool on) {
  record_ = on;
  if (!on) recorded_.clear();
}

void Executor::prepare_run(int n, RandomKey random) {
  CRUMB_CHECK(n >= 1 && n <= max_batch(), "executor compiled for up to ", max_batch(), " samples was given ", n);
  for (ValueId x : g_.inputs()) CRUMB_CHECK(bound_[x], "input '", g_.value(x).name, "' is not bound");
  for (ValueId v : input_views_) ptr_[v] = ptr_[g_.storage_root(v)];
  backend_.activate();
  if (random_.size()) backend_.upload(random_.data(), &random, sizeof random);
}

void Executor::run(int n, bool first_micro_batch, bool last_micro_batch, double loss_scale, RandomKey random) {
  prepare_run(n, random);
  if (!recording() || (observer_ && last_micro_batch)) return enqueue(n, first_micro_batch, last_micro_batch, loss_scale);

  // Looked up without building a key: a replay allocates nothing.
  const std::vector<ValueId>& graph_inputs = g_.inputs();
  auto same_inputs = [&](const Recorded& r) {
    for (std::size_t i = 0; i < graph_inputs.size(); ++i)
      if (r.inputs[i] != bound_[graph_inputs[i]]) return false;
    return true;
  };
  for (Recorded& r : recorded_)
    if (r.n == n && r.first == first_micro_batch && r.last == last_micro_batch && r.loss_scale == loss_scale &&
        same_inputs(r))
      return r.recording->replay();
  std::unique_ptr<Recording> recording =
      backend_.record([&] { enqueue(n, first_micro_batch, last_micro_batch, loss_scale); });
  if (!recording) {  // a step refused capture: from now on, run the steps themselves
    record_ = false;
    recorded_.clear();
    return enqueue(n, first_micro_batch, last_micro_batch, loss_scale);
  }
  // A handful of keys repeat (full, ragged and epoch-tail micro-batches, two staging slots); a bound keeps
  // a caller that varies them endlessly from piling up recordings.
  constexpr std::size_t kMaxRecorded = 32;
  if (recorded_.size() == kMaxRecorded) recorded_.erase(recorded_.begin());
  std::vector<const void*> inputs;
  for (ValueId x : graph_inputs) inputs.push_back(bound_[x]);
  recorded_.push_back({n, first_micro_batch, last_micro_batch, loss_scale, std::move(inputs), std::move(recording)});
  recorded_.back().recording->replay();
}

std::vector<double> Executor::time_steps(int n, RandomKey random) {
  prepare_run(n, random);
  std::vector<double> seconds(compiled_.plan.order.size(), 0.0);
  enqueue(n, true, true, 1.0 / n, &seconds);
  return seconds;
}

StepArgs Executor::step_args() const {
  StepArgs a;
  a.backend = &backend_;
  a.graph = &g_;
  a.ptr = ptr_.data();
  a.training = compiled_.pass == Pass::Train;
  a.random = reinterpret_cast<const RandomKey*>(random_.data());
  a.copies = copies_.get();
  a.commit = commit_;
  return a;
}

std::vector<Executor::BatchTotal> Executor::batch_totals() const {
  std::vector<BatchTotal> totals;
  for (const Step& s : steps_)
    if (s.commit)
      for (ValueId v : s.node->out)
        if (g_.value(v).kind == ValueKind::Metric)
          totals.push_back({static_cast<double*>(ptr_[v]), static_cast<int>(g_.value(v).count(1) / 3)});
  return totals;
}

void Executor::commit_totals() {
  backend_.activate();
  StepArgs a = step_args();
  a.n = max_batch();
  for (const Step& s : steps_)
    if (s.commit) {
      a.node = s.node;
      a.state = s.state;
      try {
        s.commit(a);
      } catch (const Error& e) {
        fail_in(s, a.n, e.what());
      }
    }
}

void Executor::enqueue(int n, bool first_micro_batch, bool last_micro_batch, double loss_scale,
                       std::vector<double>* seconds) {
  if (first_micro_batch) backend_.zero(metrics_.data(), metrics_.size());
  StepArgs a = step_args();
  a.n = n;
  a.loss_scale = loss_scale;
  a.last = last_micro_batch;
  StepObserver* const observer = last_micro_batch ? observer_ : nullptr;
  if (observer) observer->before_run();
  for (const Step& s : steps_) {
    a.node = s.node;
    a.state = s.state;
    a.workspace = s.workspace;
    a.workspace_bytes = s.workspace_bytes;
    a.accumulate = s.node->grad_write == GradWrite::Accumulate ||
                   (s.node->grad_write == GradWrite::FirstMicroBatch && !first_micro_batch);
    const auto start = std::chrono::steady_clock::now();
    try {
      s.fn(a);
      if (seconds) backend_.synchronize();
    } catch (const Error& e) {
      fail_in(s, n, e.what());
    }
    if (seconds)
      (*seconds)[s.position] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (observer) observer->after_step(*s.node);
  }
  if (observer) observer->after_run();
}

}  // namespace crumb
