#include "engine/graph/graph_ops.h"

#include "engine/graph/autograd.h"

namespace crumb {
namespace {

void add_backward(GradBuilder& gb, const Node& n) {
  const ValueId dy = gb.grad(n.out[0]);
  for (ValueId v : n.in)
    if (gb.needs_grad(v)) gb.add_grad(v, dy);
}

void infer_cast(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(1));
  ops::set_out_dims(g, n, 0, g.value(n.in[0]).dims);
}

// The gradient goes back to the input's dtype: a cast to the float dtype's is one to the master dtype.
void cast_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0];
  const Graph& g = gb.graph();
  const ValueId dx = gb.new_grad_value(x, "grad(" + g.value(x).name + ")");
  gb.emit(g.value(x).dtype == g.float_dtype() ? kCast : kCastMaster, {gb.grad(n.out[0])}, {dx}, n.name + ".backward");
  gb.add_grad(x, dx);
}

}  // namespace

const OpDef kAdd = OpDef("add", ops::infer_same).with_backward(add_backward).with_inplace(true)
                   .with_recompute(ops::recompute_clone).with_layouts(Layouts::Any);
const OpDef kCast = OpDef("cast", infer_cast).with_backward(cast_backward).with_recompute(ops::recompute_clone)
                    .with_layouts(Layouts::Any);
const OpDef kCastMaster = OpDef("cast_master", infer_cast).with_backward(cast_backward)
                          .with_outputs({OutDType::Master}).with_recompute(ops::recompute_clone)
                          .with_layouts(Layouts::Any);

}  // namespace crumb
