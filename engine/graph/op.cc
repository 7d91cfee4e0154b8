#include "engine/graph/autograd.h"
#include "engine/base/error.h"
#include "engine/graph/op.h"

namespace crumb {

ImplTable& impl_table() {
  static ImplTable table;
  return table;
}

void ImplTable::add(const OpDef& op, Device device, DType dtype, OpImpl impl) {
  CRUMB_CHECK(impl.run && !find(op, device, dtype), "op '", op.name, "': a ", device_name(device), " ",
              dtype_name(dtype), " implementation is bound twice or has no run function");
  rows_.push_back({&op, device, dtype, impl});
}

const OpImpl* ImplTable::find(const OpDef& op, Device device, DType dtype) const {
  for (const Row& r : rows_)
    if (r.op == &op && r.device == device && r.dtype == dtype) return &r.impl;
  return nullptr;
}

namespace ops {

void fail(const Node& n, const std::string& message) {
  CRUMB_FAIL("layer '", n.name, "' (", n.def->name, "): ", message);
}

void expect_arity(const Node& n, Inputs in, Outputs out) {
  if (n.in.size() < in.lo || n.in.size() > in.hi || n.out.size() != out.count)
    fail(n, detail::concat("expects ", in.lo, in.lo == in.hi ? "" : detail::concat("..", in.hi), " inputs and ",
                           out.count, " outputs, got ", n.in.size(), " and ", n.out.size()));
}

void set_out_dims(Graph& g, const Node& n, int i, const Dims& dims) {
  Value& v = g.value(n.out.at(i));
  if (v.dims.empty() && v.producer < 0 && (v.kind == ValueKind::Activation || v.kind == ValueKind::Metric)) {
    v.dims = dims;
    return;
  }
  if (v.dims != dims)
    fail(n, detail::concat("output '", v.name, "' has shape ", dims_str(v.dims), " but the op produces ",
                           dims_str(dims)));
}

void infer_same(Graph& g, Node& n) {
  expect_arity(n, inputs(1, 2), outputs(1));
  for (ValueId v : n.in)
    if (g.value(v).dims != g.value(n.in[0]).dims || g.value(v).batched != g.value(n.in[0]).batched)
      fail(n, "inputs have different shapes " + dims_str(g.value(n.in[0]).dims) + " and " + dims_str(g.value(v).dims));
  set_out_dims(g, n, 0, g.value(n.in[0]).dims);
}

std::vector<ValueId> add_recompute(Graph& g, const Node& n, const OpDef& def, std::vector<ValueId> in,
                                   std::size_t outputs) {
  Node c;
  c.def = &def;
  c.name = n.name + std::string(kRecomputeSuffix);
  c.in = std::move(in);
  c.attrs = n.attrs;  // a dropout layer's hash is among them: the same mask again
  c.geometry = n.geometry;
  c.layout = n.layout;
  for (std::size_t i = 0; i < outputs; ++i) c.out.push_back(g.add_like(n.out[i], g.value(n.out[i]).name + ".recomputed"));
  std::vector<ValueId> out = c.out;
  out.resize(n.out.size(), -1);
  g.add_node(std::move(c));
  return out;
}

std::vector<ValueId> recompute_clone(Graph& g, const Node& n, const std::vector<ValueId>& in) {
  return add_recompute(g, n, *n.def, in, n.out.size());
}

void weighted_backward(GradBuilder& gb, const Node& n, const OpDef& bwd_data, const OpDef& bwd_weight) {
  const ValueId x = n.in[0], w = n.in[1];
  const ValueId dy = gb.grad(n.out[0]);
  if (gb.needs_grad(x)) {
    const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
    gb.emit(bwd_data, {dy, w}, {dx}, n.name + ".backward_data", n.attrs, n.geometry);
    gb.add_grad(x, dx);
  }
  std::vector<ValueId> outs{gb.param_grad(w)};
  const GradWrite write = gb.claim_param_grad(w);
  if (n.in.size() == 3) {
    outs.push_back(gb.param_grad(n.in[2]));
    if (gb.claim_param_grad(n.in[2]) != write) fail(n, "a bias shared without its weight is not supported");
  }
  gb.emit(bwd_weight, {dy, x}, outs, n.name + ".backward_weight", n.attrs, n.geometry, write);
}

}  // namespace ops
}  // namespace crumb
