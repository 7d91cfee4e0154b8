#include "engine/graph/autograd.h"
#include "engine/graph/graph_ops.h"

#include "engine/base/error.h"

namespace crumb {

GradBuilder::GradBuilder(Graph& g) : g_(g), grad_(g.num_values(), -1), claimed_(g.num_values(), false) {}

ValueId GradBuilder::new_grad_value(ValueId v, const std::string& name) {
  const ValueId id = g_.add_like(v, name);
  grad_.resize(g_.num_values(), -1);
  claimed_.resize(g_.num_values(), false);
  return id;
}

void GradBuilder::add_grad(ValueId v, ValueId dv) {
  if (grad_.at(v) < 0) {
    grad_[v] = dv;
    return;
  }
  const ValueId sum = new_grad_value(v, "grad(" + g_.value(v).name + ")");
  emit(kAdd, {grad_[v], dv}, {sum}, "grad_sum(" + g_.value(v).name + ")");
  grad_[v] = sum;
}

ValueId GradBuilder::param_grad(ValueId param) {
  Value& p = g_.value(param);
  CRUMB_CHECK(p.kind == ValueKind::Param, "value '", p.name, "' is not a parameter");
  return p.grad;
}

GradWrite GradBuilder::claim_param_grad(ValueId param) {
  if (claimed_.at(param)) return GradWrite::Accumulate;
  claimed_[param] = true;
  return GradWrite::FirstMicroBatch;
}

void GradBuilder::emit(const OpDef& def, std::vector<ValueId> in, std::vector<ValueId> out, const std::string& name,
                       std::any attrs, std::any geometry, GradWrite write) {
  Node n;
  n.def = &def;
  n.name = name;
  n.in = std::move(in);
  n.out = std::move(out);
  n.attrs = std::move(attrs);
  n.geometry = std::move(geometry);
  n.backward = true;
  n.grad_write = write;
  g_.add_node(std::move(n));
}

void build_backward(Graph& g) {
  CRUMB_CHECK(g.loss() >= 0, "build_backward: the graph has no loss (call Graph::set_loss)");
  for (int i = 0; i < g.num_nodes(); ++i)
    CRUMB_CHECK(!g.node(i).backward, "build_backward: the graph already has a backward pass");
  for (ValueId p : g.params()) {
    Value d;
    d.name = "grad(" + g.value(p).name + ")";
    d.kind = ValueKind::ParamGrad;
    d.dtype = g.master_dtype();
    d.dims = g.value(p).dims;
    g.value(p).grad = g.add_value(std::move(d));
  }
  GradBuilder gb(g);
  const ValueId loss = g.loss();
  for (NodeId i = g.num_nodes() - 1; i >= 0; --i) {
    // Copy: emitting nodes may reallocate the node array.
    const Node n = g.node(i);
    bool flows = false;
    for (ValueId o : n.out) flows = flows || o == loss || gb.grad(o) >= 0;
    if (!flows) continue;
    bool wanted = false;
    for (ValueId v : n.in) wanted = wanted || gb.needs_grad(v);
    if (!wanted) continue;
    CRUMB_CHECK(n.def->backward, "layer '", n.name, "' (", n.def->name, ") has no gradient rule");
    n.def->backward(gb, n);
  }
  for (ValueId x : g.inputs())
    if (g.value(x).requires_grad) g.value(x).grad = gb.grad(x);
}

}  // namespace crumb
