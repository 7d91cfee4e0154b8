#include "engine/graph/saved_values.h"

#include <algorithm>

namespace crumb {

int first_backward_node(const Graph& g) {
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    if (g.node(i).backward) return i;
  return g.num_nodes();
}

std::vector<SavedValue> saved_values(const Graph& g) {
  std::vector<SavedValue> at(g.num_values());
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    for (ValueId v : n.in) {
      SavedValue& s = at[v];
      if (!n.backward) {
        s.last_forward = i;
      } else {
        if (s.first_backward < 0) s.first_backward = i;
        s.last_backward = i;
      }
    }
  }
  std::vector<SavedValue> saved;
  for (ValueId v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(v);
    SavedValue& s = at[v];
    if (val.kind != ValueKind::Activation || val.producer < 0 || g.node(val.producer).backward || s.first_backward < 0 ||
        val.dtype != g.float_dtype() || v == g.loss() || val.host)
      continue;
    s.value = v;
    s.produced = val.producer;
    if (s.last_forward < 0) s.last_forward = s.produced;
    saved.push_back(s);
  }
  std::sort(saved.begin(), saved.end(), [](const SavedValue& a, const SavedValue& b) { return a.produced < b.produced; });
  return saved;
}

}  // namespace crumb
