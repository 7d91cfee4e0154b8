// Elementwise ops: ReLU (in place when the planner allows), add (also sums gradients), reshape (a view).
#include "engine/autograd.h"
#include "engine/ops/op.h"
#include "kernels/cpu/kernels.h"

namespace crumb {
namespace {

std::size_t count(const StepArgs& a) { return static_cast<std::size_t>(a.out_value().count(a.n)); }

void infer_same(Graph& g, Node& n) {  // every input shaped like out[0]
  ops::expect_arity(n, 1, 2, 1);
  for (ValueId v : n.in)
    if (g.value(v).dims != g.value(n.in[0]).dims || g.value(v).batched != g.value(n.in[0]).batched)
      ops::fail(n, "inputs have different shapes " + dims_str(g.value(n.in[0]).dims) + " and " + dims_str(g.value(v).dims));
  ops::set_out_dims(g, n, 0, g.value(n.in[0]).dims);
}

void relu_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0], y = n.out[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  // Uses y rather than x so the forward can overwrite x in place.
  gb.emit(kReluBwd, {gb.grad(y), y}, {dx}, n.name + ".backward");
  gb.add_grad(x, dx);
}

template <class T> void relu_fwd_cpu(const StepArgs& a) { cpu::relu_forward<T>(a.out<T>(), a.in<T>(0), count(a)); }
template <class T> void relu_bwd_cpu(const StepArgs& a) {
  cpu::relu_backward<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), count(a), a.accumulate);
}

void add_backward(GradBuilder& gb, const Node& n) {
  const ValueId dy = gb.grad(n.out[0]);
  for (ValueId v : n.in)
    if (gb.needs_grad(v)) gb.add_grad(v, dy);
}

template <class T> void add_cpu(const StepArgs& a) { cpu::add_forward<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), count(a)); }

void infer_reshape(Graph& g, Node& n) {
  ops::expect_arity(n, 1, 1, 1);
  const Value& x = g.value(n.in[0]);
  if (dims_count(n.attrs.dims) != dims_count(x.dims))
    ops::fail(n, "cannot reshape per-sample " + dims_str(x.dims) + " to " + dims_str(n.attrs.dims));
  ops::set_out_dims(g, n, 0, n.attrs.dims);
}

void reshape_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  Attrs to;
  to.dims = gb.graph().value(x).dims;
  gb.emit(kReshape, {gb.grad(n.out[0])}, {dx}, n.name + ".backward", to);
  gb.add_grad(x, dx);
}

}  // namespace

const OpDef kRelu{"relu", infer_same, relu_backward, nullptr, true, false, CRUMB_CPU_IMPL(relu_fwd_cpu)};
const OpDef kReluBwd{"relu_backward", infer_same, nullptr, nullptr, true, false, CRUMB_CPU_IMPL(relu_bwd_cpu)};
const OpDef kAdd{"add", infer_same, add_backward, nullptr, true, false, CRUMB_CPU_IMPL(add_cpu)};
const OpDef kReshape{"reshape", infer_reshape, reshape_backward, nullptr, false, true, nullptr, nullptr};

}  // namespace crumb
