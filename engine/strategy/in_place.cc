#include "engine/strategy/in_place.h"

#include <algorithm>

#include "engine/graph/fusion.h"
#include "engine/graph/op.h"
#include "engine/graph/saved_values.h"
#include "engine/strategy/recompute.h"

namespace crumb {

std::vector<ValueId> recompute_in_place(Graph& g) {
  const std::vector<SavedValue> saved = saved_values(g);
  std::vector<bool> is_saved(g.num_values(), false), chosen(g.num_values(), false);
  for (const SavedValue& s : saved) is_saved[s.value] = true;
  for (const SavedValue& s : saved) {
    const Node& p = g.node(g.value(s.value).producer);
    if (!in_place_op(*p.def) || s.value != p.out[0]) continue;
    const std::vector<ValueId> closure = recompute_closure(g, s.value, is_saved);
    // GEMM-like ops (those with a FLOP count) are what recomputing costs most; they stay kept.
    if (std::any_of(closure.begin(), closure.end(), [&](ValueId v) { return g.node(g.value(v).producer).def->flops; }))
      continue;
    for (ValueId v : closure) chosen[v] = true;
  }
  std::vector<ValueId> values;
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (chosen[v]) values.push_back(v);
  if (!values.empty()) recompute(g, values);
  return values;
}

}  // namespace crumb
