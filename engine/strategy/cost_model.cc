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
  return it == node_seconds.end() ? 0.0 : it->second * m / measured_batch * (n.lean ? lean_slowdown : 1.0);
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

CostModel estimate_costs(const Graph& g, int m) {
  constexpr double kFlopsPerSecond = 1e11, kBytesPerSecond = 1e10;
  CostModel c;
  c.measured_batch = m;
  c.seconds_per_byte = 1 / kBytesPerSecond;
  for (NodeId id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    double bytes = 0;
    for (const std::vector<ValueId>* values : {&n.in, &n.out})
      for (ValueId v : *values) bytes += double(g.value(v).count(m)) * dtype_size(g.value(v).dtype);
    c.node_seconds[n.name] = (n.def->flops ? n.def->flops(g, n, m) / kFlopsPerSecond : 0.0) + bytes / kBytesPerSecond;
  }
  return c;
}

int timing_batch(int m, Device device, int index) {
  return std::max(1, std::min(m, backend(device, index).timing_batch()));
}

CostModel measure_costs(const Graph& g, int m, Device device, int index) {
  CostModel c;
  Backend& b = backend(device, index);
  c.measured_batch = timing_batch(m, device, index);
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
    std::vector<double> best;
    for (int run = 0; run < 3; ++run) {
      const std::vector<double> t = e.time_steps(c.measured_batch);
      if (run == 0) continue;  // warm-up: first touches of the arena, lazily built library state
      if (best.empty()) best = t;
      for (std::size_t s = 0; s < t.size(); ++s) best[s] = std::min(best[s], t[s]);
    }
    for (std::size_t s = 0; s < best.size(); ++s) c.node_seconds[g.node(e.plan().order[s]).name] = best[s];
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

}  // namespace crumb
