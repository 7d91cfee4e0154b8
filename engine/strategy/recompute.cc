#include "engine/strategy/recompute.h"

#include <functional>

#include "engine/base/error.h"
#include "engine/graph/op.h"

namespace crumb {

bool recomputable(const Graph& g, ValueId v) {
  const Value& val = g.value(v);
  if (val.kind != ValueKind::Activation || val.producer < 0) return false;
  const Node& p = g.node(val.producer);
  // A rule other than a plain clone recomputes out[0] alone (BatchNorm's output, not its statistics).
  return !p.backward && p.def->recompute && (v == p.out[0] || p.def->recompute == ops::recompute_clone);
}

std::vector<ValueId> recompute_closure(const Graph& g, ValueId v, const std::vector<bool>& is_saved) {
  std::vector<ValueId> closure;
  std::vector<bool> seen(g.num_values(), false);
  bool ok = true;
  std::function<void(ValueId)> visit = [&](ValueId u) {
    if (!ok || seen[u]) return;
    seen[u] = true;
    if (!recomputable(g, u)) {
      ok = false;
      return;
    }
    closure.push_back(u);
    const Node& p = g.node(g.value(u).producer);
    for (ValueId x : p.in)  // parameters and running statistics are not activations
      if (g.value(x).kind == ValueKind::Activation && !is_saved[x]) visit(x);
  };
  visit(v);
  if (!ok) closure.clear();
  return closure;
}

int recompute(Graph& g, const std::vector<ValueId>& values, const std::vector<Refresh>& refresh) {
  std::vector<bool> wanted(g.num_values(), false);
  for (ValueId v : values) {
    CRUMB_CHECK(v >= 0 && v < g.num_values() && recomputable(g, v), "recompute: '",
                v >= 0 && v < g.num_values() ? g.value(v).name : std::to_string(v),
                "' is not a forward value of an op that can be recomputed");
    wanted[v] = true;
  }
  const int nodes_before = g.num_nodes(), backward_from = first_backward_node(g);
  std::vector<std::vector<ValueId>> refresh_at(nodes_before - backward_from);
  for (const Refresh& r : refresh) {
    CRUMB_CHECK(r.before >= backward_from && r.before < nodes_before, "recompute: a refresh before node ", r.before,
                ", which is not a backward node (", backward_from, " to ", nodes_before - 1, ")");
    for (ValueId v : r.values)
      CRUMB_CHECK(v >= 0 && v < g.num_values() && wanted[v], "recompute: refresh of '",
                  v >= 0 && v < g.num_values() ? g.value(v).name : std::to_string(v), "', which is not recomputed");
    auto& at = refresh_at[r.before - backward_from];
    at.insert(at.end(), r.values.begin(), r.values.end());
  }
  std::vector<NodeId> order;
  for (NodeId i = 0; i < backward_from; ++i) order.push_back(i);
  std::vector<ValueId> copy_of(g.num_values(), -1);
  // The recomputed copy of u (cloning its producer, and first the inputs that are recomputed too).
  std::function<ValueId(ValueId)> again = [&](ValueId u) -> ValueId {
    if (!wanted[u]) return u;
    if (copy_of[u] >= 0) return copy_of[u];
    const Node p = g.node(g.value(u).producer);  // a copy: cloning appends nodes
    std::vector<ValueId> in;
    for (ValueId x : p.in) in.push_back(again(x));
    const std::vector<ValueId> out = p.def->recompute(g, p, in);
    for (std::size_t i = 0; i < out.size(); ++i)
      if (out[i] >= 0) copy_of[p.out[i]] = out[i];
    CRUMB_CHECK(copy_of[u] >= 0, "recompute: layer '", p.name, "' does not recompute '", g.value(u).name, "'");
    return copy_of[u];
  };
  for (NodeId i = backward_from; i < nodes_before; ++i) {
    for (ValueId v : refresh_at[i - backward_from]) copy_of[v] = -1;
    const int before = g.num_nodes();
    std::vector<ValueId> in = g.node(i).in;
    for (ValueId& x : in) x = again(x);
    for (NodeId added = before; added < g.num_nodes(); ++added) {
      g.node(added).backward = g.node(added).train_only = true;
      order.push_back(added);
    }
    g.node(i).in = in;
    order.push_back(i);
  }
  g.reorder(order);
  return g.num_nodes() - nodes_before;
}

}  // namespace crumb
