#include "engine/strategy/swap.h"

#include <algorithm>

#include "engine/base/error.h"
#include "engine/graph/op.h"
#include "engine/graph/saved_values.h"
#include "engine/ops/swap.h"

namespace crumb {
namespace {

ValueId copy_value(Graph& g, ValueId v, const char* suffix, bool host) {
  const ValueId c = g.add_like(v, g.value(v).name + suffix);
  g.value(c).host = host;
  return c;
}

NodeId add(Graph& g, const OpDef& def, const std::string& name, ValueId in, ValueId out, int ticket, bool backward) {
  Node n;
  n.def = &def;
  n.name = name;
  n.in = {in};
  if (out >= 0) n.out = {out};
  n.attrs = SwapAttrs{ticket};
  n.backward = backward;
  n.train_only = true;
  n.layout = g.value(in).layout;  // a byte copy, in whatever layout its value has
  return g.add_node(std::move(n));
}

}  // namespace

SwapResult swap(Graph& g, const std::vector<ValueId>& values, int batch, const SwapTiming& timing) {
  const int nodes = g.num_nodes(), backward_from = first_backward_node(g);
  std::vector<SavedValue> saved_at(g.num_values());
  for (const SavedValue& s : saved_values(g)) saved_at[s.value] = s;
  std::vector<SavedValue> todo;
  for (ValueId v : values) {
    CRUMB_CHECK(v >= 0 && v < g.num_values() && saved_at[v].value == v, "swap: '",
                v >= 0 && v < g.num_values() ? g.value(v).name : std::to_string(v),
                "' is not a forward value the backward pass reads");
    todo.push_back(saved_at[v]);
  }
  std::sort(todo.begin(), todo.end(), [](const SavedValue& a, const SavedValue& b) { return a.produced < b.produced; });

  // Predicted clock at the end of each node, and copies as one queue in the order they start.
  auto seconds = [&](int i) { return timing.node_seconds.empty() ? 1.0 : timing.node_seconds.at(i); };
  std::vector<double> end(nodes);
  for (int i = 0; i < nodes; ++i) end[i] = (i ? end[i - 1] : 0.0) + seconds(i);
  auto copy_seconds = [&](ValueId v) {
    const double bytes = double(g.value(v).count(batch)) * dtype_size(g.value(v).dtype);
    return timing.node_seconds.empty() ? 1.0 : bytes * timing.seconds_per_byte;
  };
  auto bytes_of = [&](ValueId v) { return static_cast<std::size_t>(g.value(v).count(batch)) * dtype_size(g.value(v).dtype); };

  struct Plan {
    SavedValue s;
    int wait_out;  // the forward node after which the copy out is waited for
    int start_in;  // the backward node before which the copy back starts
  };
  std::vector<Plan> plans;
  double queue_free = 0;
  for (const SavedValue& s : todo) {
    const double done = std::max(queue_free, end[s.produced]) + copy_seconds(s.value);
    queue_free = done;
    int wait = s.last_forward;
    while (wait + 1 < backward_from && end[wait] < done) ++wait;
    plans.push_back({s, wait, s.first_backward});
  }
  // Copies back, in the order they are read: each starts as early as its predicted copy time asks, within
  // the window (bytes prefetched and not yet read, per backward node) and never before the backward pass.
  std::vector<std::size_t> in_flight(nodes, 0);
  std::vector<Plan*> by_read;
  for (Plan& p : plans) by_read.push_back(&p);
  std::sort(by_read.begin(), by_read.end(), [](const Plan* a, const Plan* b) { return a->s.first_backward < b->s.first_backward; });
  for (Plan* p : by_read) {
    const std::size_t bytes = bytes_of(p->s.value);
    const double need = copy_seconds(p->s.value);
    int start = p->s.first_backward;
    while (start - 1 >= backward_from && start - 1 > p->wait_out + 1 &&
           end[p->s.first_backward - 1] - end[start - 1] < need && in_flight[start - 1] + bytes <= timing.window_bytes)
      --start;
    p->start_in = start;
    for (int i = start; i < p->s.first_backward; ++i) in_flight[i] += bytes;
  }

  SwapResult r;
  std::vector<std::vector<NodeId>> after(nodes), before(nodes);
  std::vector<ValueId> back_of(g.num_values(), -1);  // per value of g as given: its copy back, if swapped
  int ticket = 0;
  for (const Plan& p : plans) {
    // Back before the copy out is waited for: nothing would leave the arena.
    if (p.start_in <= p.wait_out + 1) continue;
    const ValueId v = p.s.value;
    const std::string name = g.value(v).name;  // a copy: adding values moves them
    const ValueId host = copy_value(g, v, ".host", true), back = copy_value(g, v, ".swapped_in", false);
    after[p.s.produced].push_back(add(g, kSwapCopy, name + ".swap_out", v, host, ticket, false));
    after[p.wait_out].push_back(add(g, kSwapWait, name + ".swap_out_wait", v, -1, ticket, false));
    before[p.start_in].push_back(add(g, kSwapCopy, name + ".swap_in", host, back, ticket + 1, true));
    before[p.s.first_backward].push_back(add(g, kSwapWait, name + ".swap_in_wait", back, -1, ticket + 1, true));
    ticket += 2;
    back_of[v] = back;
    r.swapped.push_back(v);
    r.host.push_back(host);
  }
  // after[] of one node: copies out start in the order they were planned, waits follow.
  std::vector<NodeId> order;
  for (int i = 0; i < nodes; ++i) {
    for (NodeId b : before[i]) order.push_back(b);
    order.push_back(i);
    for (NodeId a : after[i]) order.push_back(a);
    if (g.node(i).backward)
      for (ValueId& x : g.node(i).in)
        if (back_of[x] >= 0) x = back_of[x];
  }
  r.nodes_added = g.num_nodes() - nodes;
  g.reorder(order);
  return r;
}

}  // namespace crumb
