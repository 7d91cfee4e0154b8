#include "engine/strategy/cost_model.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "engine/base/threads.h"
#include "engine/device/backend.h"
#include "engine/plan/compile.h"
#include "engine/run/executor.h"
#include "engine/graph/op.h"
#include "engine/run/params.h"
#include "engine/ops/swap.h"

namespace crumb {

double CostModel::seconds(const Node& n, int m) const {
  if (n.def == &kSwapCopy || n.def == &kSwapWait || measured_batch <= 0) return 0;
  const std::string_view suffix = ops::kRecomputeSuffix;
  auto it = node_seconds.find(n.name);
  if (it == node_seconds.end() && n.name.size() > suffix.size() &&
      n.name.compare(n.name.size() - suffix.size(), suffix.size(), suffix) == 0)
    it = node_seconds.find(n.name.substr(0, n.name.size() - suffix.size()));
  if (it == node_seconds.end()) return 0.0;
  const auto fixed_it = fixed_seconds.find(it->first);
  const double fixed = fixed_it == fixed_seconds.end() ? 0.0 : fixed_it->second;
  const double seconds = fixed + (it->second - fixed) * m / measured_batch;
  const bool lean_measured = measured_lean.count(it->first) != 0;
  return n.lean == lean_measured ? seconds : n.lean ? seconds * lean_slowdown : seconds / lean_slowdown;
}

double CostModel::simulate(const Graph& g, int m) const {
  double clock = 0, queue_free = 0;
  std::vector<double> done;
  for (NodeId id : pass_order(g, Pass::Train)) {
    const Node& n = g.node(id);
    if (n.def == &kSwapCopy || n.def == &kSwapWait) {
      const int ticket = ops::attrs<SwapAttrs>(n).ticket;
      if (done.size() <= static_cast<std::size_t>(ticket)) done.resize(ticket + 1, 0.0);
      if (n.def == &kSwapWait) {
        clock = std::max(clock, done[ticket]);
        continue;
      }
      const Value& v = g.value(n.in[0]);
      const double copy = double(v.count(m)) * dtype_size(v.dtype) * seconds_per_byte;
      if (!copies_overlap) clock += copy;
      queue_free = std::max(queue_free, clock) + (copies_overlap ? copy : 0.0);
      done[ticket] = queue_free;
      continue;
    }
    clock += seconds(n, m);
  }
  return clock;
}

namespace {

// The bytes node n reads and writes at m samples.
double node_bytes(const Graph& g, const Node& n, int64_t m) {
  double bytes = 0;
  for (const std::vector<ValueId>* values : {&n.in, &n.out})
    for (ValueId v : *values) bytes += double(g.value(v).count(m)) * dtype_size(g.value(v).dtype);
  return bytes;
}

}  // namespace

CostModel estimate_costs(const Graph& g, int m) {
  constexpr double kFlopsPerSecond = 1e11, kBytesPerSecond = 1e10;
  CostModel c;
  c.measured_batch = m;
  c.seconds_per_byte = 1 / kBytesPerSecond;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    c.node_seconds[n.name] =
        (n.def->flops ? n.def->flops(g, n, m) / kFlopsPerSecond : 0.0) + node_bytes(g, n, m) / kBytesPerSecond;
  }
  return c;
}

int timing_batch(const Graph& g, int m, Device device, int index) {
  const Backend& b = backend(device, index);
  int64_t samples = b.timing_batch();
  std::size_t step_bytes = 0;  // per sample (what one more sample adds), of the step with the most
  for (NodeId id = 0; id < g.num_nodes(); ++id)
    step_bytes = std::max(step_bytes, static_cast<std::size_t>(node_bytes(g, g.node(id), 1) - node_bytes(g, g.node(id), 0)));
  if (const std::size_t cache = b.cache_bytes(); cache && step_bytes)
    samples = std::max<int64_t>(samples, static_cast<int64_t>((cache + step_bytes - 1) / step_bytes));
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(m, samples)));
}

namespace {

CostModel measure_at(const Graph& g, int samples, Device device, int index) {
  CostModel c;
  Backend& b = backend(device, index);
  c.measured_batch = samples;
  {
    ParamStore params(g, device, index);
    params.init(1);
    Arena arena(device, index);
    Executor e(g, params, arena, c.measured_batch, Pass::Train);
    std::vector<Buffer> inputs;
    for (ValueId x : g.inputs()) {
      // Zeros: valid images and valid labels (class 0) alike.
      inputs.emplace_back(static_cast<std::size_t>(g.value(x).count(c.measured_batch)) * dtype_size(g.value(x).dtype),
                          b.memory(), index);
      e.bind(x, inputs.back().data());
    }
    const int b = c.measured_batch, half = b / 2;
    e.time_steps(b);  // warm-up: first touches of the arena, lazily built library state
    constexpr int kRuns = 3;
    std::vector<std::vector<double>> at_b(e.plan().order.size()), at_half(at_b.size());
    for (int run = 0; run < kRuns; ++run) {
      const std::vector<double> tb = e.time_steps(b);
      for (std::size_t s = 0; s < tb.size(); ++s) at_b[s].push_back(tb[s]);
      if (half < 1) continue;
      const std::vector<double> th = e.time_steps(half);
      for (std::size_t s = 0; s < th.size(); ++s) at_half[s].push_back(th[s]);
    }
    auto median = [](std::vector<double>& t) {
      std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
      return t[t.size() / 2];
    };
    for (std::size_t s = 0; s < at_b.size(); ++s) {
      const Node& n = g.node(e.plan().order[s]);
      const double tb = median(at_b[s]);
      c.node_seconds[n.name] = tb;
      if (n.lean) c.measured_lean.insert(n.name);
      // The line through the two timings, at 0 samples; within [0, tb]: timing noise can tilt the line
      // of a node of microseconds either way.
      if (half >= 1) {
        const double th = median(at_half[s]);
        c.fixed_seconds[n.name] = std::clamp(th - (tb - th) * half / (b - half), 0.0, tb);
      }
    }
  }
  constexpr std::size_t kBytes = std::size_t{16} << 20;
  Buffer on_device(kBytes, b.memory(), index), host(kBytes, b.host_memory(), index);
  const std::unique_ptr<CopyQueue> q = b.make_copy_queue(1);
  double fastest = 1e30;
  for (int run = 0; run < 3; ++run)
    for (bool out : {true, false}) {
      b.synchronize();
      const auto start = std::chrono::steady_clock::now();
      q->start(0, out ? host.data() : on_device.data(), out ? on_device.data() : host.data(), kBytes);
      q->wait(0);
      b.synchronize();
      fastest = std::min(fastest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  c.seconds_per_byte = fastest / kBytes;
  c.copies_overlap = b.copies_overlap();
  c.lean_slowdown = std::min(8, std::max(1, num_threads()));
  return c;
}

}  // namespace

CostModel measure_costs(const Graph& g, int m, Device device, int index) {
  return measure_at(g, timing_batch(g, m, device, index), device, index);
}

CostModel align_costs(const Graph& g, CostModel own, const Graph& reference, const CostModel& measured) {
  CRUMB_CHECK(own.measured_batch == measured.measured_batch, "align_costs: costs measured at ",
              own.measured_batch, " and ", measured.measured_batch, " samples cannot be compared");
  std::unordered_map<std::string, NodeId> by_name;
  for (NodeId i = 0; i < reference.num_nodes(); ++i) by_name.emplace(reference.node(i).name, i);
  auto same_operands = [&](const std::vector<ValueId>& a, const std::vector<ValueId>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t k = 0; k < a.size(); ++k) {
      const Value &x = g.value(a[k]), &y = reference.value(b[k]);
      if (x.dims != y.dims || x.dtype != y.dtype || x.batched != y.batched || x.layout != y.layout) return false;
    }
    return true;
  };
  double own_shared = 0, measured_shared = 0;
  std::vector<std::string> alone;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    const auto it = by_name.find(n.name);
    const Node* r = it == by_name.end() ? nullptr : &reference.node(it->second);
    const bool shared = r && r->def == n.def && r->lean == n.lean && same_operands(n.in, r->in) &&
                        same_operands(n.out, r->out) && measured.node_seconds.count(n.name);
    if (!shared) {
      alone.push_back(n.name);
      continue;
    }
    own_shared += own.node_seconds[n.name];
    measured_shared += measured.node_seconds.at(n.name);
    own.node_seconds[n.name] = measured.node_seconds.at(n.name);
    const auto fixed = measured.fixed_seconds.find(n.name);
    if (fixed != measured.fixed_seconds.end()) own.fixed_seconds[n.name] = fixed->second;
    else own.fixed_seconds.erase(n.name);
    if (measured.measured_lean.count(n.name)) own.measured_lean.insert(n.name);
    else own.measured_lean.erase(n.name);
  }
  const double load = own_shared > 0 && measured_shared > 0 ? measured_shared / own_shared : 1.0;
  for (const std::string& name : alone) {
    if (auto t = own.node_seconds.find(name); t != own.node_seconds.end()) t->second *= load;
    if (auto t = own.fixed_seconds.find(name); t != own.fixed_seconds.end()) t->second *= load;
  }
  own.seconds_per_byte = measured.seconds_per_byte;
  return own;
}

}  // namespace crumb
