// Autograd: derives the backward graph from the forward graph, graph to graph. Walking the forward
// nodes in reverse, each op's backward rule emits backward nodes into the same Graph. Gradients of
// parameters go to persistent ParamGrad values; gradients of activations are new arena values,
// summed with an Add node where a value feeds several consumers.
#pragma once
#include <string>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"

namespace crumb {

class GradBuilder {
 public:
  explicit GradBuilder(Graph& g);
  Graph& graph() { return g_; }
  // Gradient of v as accumulated so far (-1 if nothing flowed into v).
  ValueId grad(ValueId v) const { return grad_.at(v); }
  bool needs_grad(ValueId v) const { return g_.value(v).requires_grad; }
  // A new activation shaped like v, for a gradient of v.
  ValueId new_grad_value(ValueId v, const std::string& name);
  // Records dv as (a contribution to) the gradient of v; a second contribution is summed.
  void add_grad(ValueId v, ValueId dv);
  // The persistent gradient of a parameter, and the write mode for the next node writing it.
  ValueId param_grad(ValueId param);
  GradWrite claim_param_grad(ValueId param);
  // Appends a backward node; attrs and geometry are usually the forward node's (its shape rule only
  // checks them against the values, it never derives them again).
  void emit(const OpDef& def, std::vector<ValueId> in, std::vector<ValueId> out, const std::string& name,
            std::any attrs = {}, std::any geometry = {}, GradWrite write = GradWrite::None);

 private:
  Graph& g_;
  std::vector<ValueId> grad_;
  std::vector<bool> claimed_;
};

// Appends the backward graph of g.loss() to g. Idempotent per graph: call once after building.
void build_backward(Graph& g);

}  // namespace crumb
