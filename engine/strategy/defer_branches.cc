#include "engine/strategy/defer_branches.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/graph/graph_ops.h"
#include "engine/graph/saved_values.h"

namespace crumb {

namespace {

int64_t bytes_per_sample(const Graph& g, ValueId v) {
  return g.value(v).count(1) * static_cast<int64_t>(dtype_size(g.value(v).dtype));
}

}  // namespace

int defer_gradient_branches(Graph& g) {
  const NodeId backward = first_backward_node(g);
  int moved = 0;
  // Moving a branch to just before its sum permutes the nodes before the sum only: the sums after keep
  // their places.
  for (NodeId s = backward; s < g.num_nodes(); ++s) {
    const Node& sum = g.node(s);
    if (sum.def != &kAdd || sum.in.size() != 2) continue;
    const NodeId p0 = g.value(sum.in[0]).producer, p1 = g.value(sum.in[1]).producer;
    if (p0 < backward || p1 < backward) continue;
    const ValueId a = p0 < p1 ? sum.in[0] : sum.in[1];
    const NodeId first_branch = std::min(p0, p1);
    std::vector<std::vector<NodeId>> readers(g.num_values());
    for (NodeId i = 0; i < g.num_nodes(); ++i)
      for (ValueId v : g.node(i).in) readers[v].push_back(i);
    // The candidates: the backward nodes before the sum that a is computed from, and those that read what
    // they compute and compute nothing read in this pass (parameter gradients).
    std::vector<bool> in_branch(g.num_nodes(), false);
    // An explicit stack: the ancestors of a residual chain's gradient are the whole backward pass before it.
    for (std::vector<NodeId> stack{first_branch}; !stack.empty();) {
      const NodeId i = stack.back();
      stack.pop_back();
      if (i < backward || i >= s || in_branch[i]) continue;
      in_branch[i] = true;
      for (ValueId v : g.node(i).in) stack.push_back(g.value(v).producer);
    }
    for (NodeId i = backward; i < s; ++i) {
      if (in_branch[i]) continue;
      bool reads = false, read = false;
      for (ValueId v : g.node(i).in) {
        const NodeId p = g.value(v).producer;
        reads |= p >= 0 && in_branch[p];
      }
      for (ValueId v : g.node(i).out) read |= !readers[v].empty();
      if (reads && !read) in_branch[i] = true;
    }
    // Left out, until none is: a node with a value read outside the branch (but a by the sum), or writing a
    // parameter gradient that a node outside the branch writes too (the first write sets it, the others add).
    std::vector<bool> writes_outside(g.num_values(), false);
    for (bool changed = true; changed;) {
      changed = false;
      std::fill(writes_outside.begin(), writes_outside.end(), false);
      for (NodeId i = 0; i < g.num_nodes(); ++i)
        if (!in_branch[i])
          for (ValueId v : g.node(i).out) writes_outside[v] = true;
      // Last node first: a node's readers come after it, so a node left out leaves out those it reads from in
      // the same pass (ascending, a chain as deep as the backward pass took a pass a node).
      for (NodeId i = s - 1; i >= backward; --i) {
        if (!in_branch[i]) continue;
        bool out = false, read = false, reads = false;
        for (ValueId v : g.node(i).out) {
          out |= g.value(v).kind == ValueKind::ParamGrad && writes_outside[v];
          for (NodeId r : readers[v]) out |= !in_branch[r] && !(r == s && v == a);
          read |= !readers[v].empty() || v == a;
        }
        for (ValueId v : g.node(i).in) reads |= g.value(v).producer >= 0 && in_branch[g.value(v).producer];
        out |= !read && !reads;  // a parameter gradient of nothing the branch computes
        if (out) in_branch[i] = false, changed = true;
      }
    }
    if (!in_branch[first_branch]) continue;
    // What it costs: the gradients the branch reads that nothing after the sum reads live until the sum.
    int64_t longer = 0;
    std::vector<bool> counted(g.num_values(), false);
    for (NodeId i = backward; i < s; ++i) {
      if (!in_branch[i]) continue;
      for (ValueId v : g.node(i).in) {
        const NodeId p = g.value(v).producer;
        if (p < backward || in_branch[p] || counted[v]) continue;
        counted[v] = true;
        bool after = false;
        for (NodeId r : readers[v]) after |= r > s;
        if (!after) longer += bytes_per_sample(g, v);
      }
    }
    if (bytes_per_sample(g, a) <= longer) continue;
    std::vector<NodeId> order, branch;
    for (NodeId i = 0; i < s; ++i) (in_branch[i] ? branch : order).push_back(i);
    order.insert(order.end(), branch.begin(), branch.end());
    for (NodeId i = s; i < g.num_nodes(); ++i) order.push_back(i);
    g.reorder(order);
    ++moved;
  }
  return moved;
}

}  // namespace crumb
