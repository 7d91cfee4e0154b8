#include "engine/ops/relu_epilogue.h"

#include <vector>

#include "engine/graph/fusion.h"
#include "engine/ops/elementwise.h"

namespace crumb {

int fuse_relu_epilogue(Graph& g, const OpDef& op, void (*mark)(Node& n)) {
  const Readers readers(g);
  std::vector<NodeId> dead;
  for (NodeId r = 0; r < g.num_nodes(); ++r) {
    const Node& relu = g.node(r);
    if (relu.def != &kRelu || relu.backward) continue;
    const ValueId z = relu.in[0];
    const NodeId p = g.value(z).producer;
    if (p < 0 || g.node(p).def != &op || g.node(p).backward || g.node(p).out[0] != z || readers.only(z) != r) continue;
    const ValueId y = relu.out[0];
    Node& n = g.node(p);
    mark(n);
    n.name = fused_name(n.name, {"relu"});
    n.out[0] = y;
    g.value(y).producer = p;
    g.value(z).producer = -1;  // unproduced and unread from now on
    dead.push_back(r);
  }
  if (!dead.empty()) g.remove_nodes(dead);
  return static_cast<int>(dead.size());
}

}  // namespace crumb
