#include "engine/ops/rewrite.h"

#include <utility>
#include <vector>

#include "engine/base/error.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/pool.h"

namespace crumb {

int reorder_relu_max_pool(Graph& g) {
  for (int i = 0; i < g.num_nodes(); ++i)
    CRUMB_CHECK(!g.node(i).backward, "graph rewrites run before build_backward");
  std::vector<int> uses(g.num_values(), 0);
  std::vector<NodeId> consumer(g.num_values(), -1);
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    for (ValueId v : g.node(i).in) ++uses[v], consumer[v] = i;
  int rewrites = 0;
  for (NodeId a = 0; a < g.num_nodes(); ++a) {
    Node& relu = g.node(a);
    if (relu.def != &kRelu) continue;
    const ValueId r = relu.out[0];
    if (uses[r] != 1 || r == g.loss() || g.node(consumer[r]).def != &kMaxPool2d) continue;
    Node& pool = g.node(consumer[r]);
    const ValueId p = pool.out[0];
    // Swap the two ops in place: node a now pools x into r, the pool's node applies ReLU to r.
    relu.def = &kMaxPool2d;
    pool.def = &kRelu;
    relu.out.push_back(pool.out[1]);  // the argmax moves with the pooling
    pool.out.pop_back();
    g.value(relu.out[1]).producer = a;
    std::swap(relu.attrs, pool.attrs);
    std::swap(relu.geometry, pool.geometry);  // the pool's input dims are unchanged: ReLU keeps the shape
    std::swap(relu.name, pool.name);
    std::swap(g.value(r).name, g.value(p).name);
    g.value(r).dims = g.value(p).dims;
    ++rewrites;
  }
  return rewrites;
}

void optimize_graph(Graph& g) { reorder_relu_max_pool(g); }

}  // namespace crumb
