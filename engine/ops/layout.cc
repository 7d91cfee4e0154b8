// The layout conversions: one run for every device and dtype, the backend's relayout (kernels/convert.h).
#include "engine/ops/layout.h"

#include "engine/base/registry.h"
#include "engine/device/backend.h"
#include "engine/device/widen.h"
#include "engine/graph/autograd.h"

namespace crumb {
namespace {

Layout target(const Node& n) { return n.def == &kToNhwc ? Layout::NHWC : Layout::NCHW; }
Layout other(Layout l) { return l == Layout::NHWC ? Layout::NCHW : Layout::NHWC; }

void infer(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(1));
  const Value& x = g.value(n.in[0]);
  const Layout to = target(n);
  if (!is_image(x)) ops::fail(n, "input '" + x.name + "' " + dims_str(x.dims) + " is not an image tensor");
  if (x.layout == to) ops::fail(n, "input '" + x.name + "' is " + layout_name(to) + " already");
  ops::set_out_dims(g, n, 0, x.dims);
  g.value(n.out[0]).layout = to;
  n.layout = to;
}

void backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  gb.emit(layout_conversion(other(target(n))), {gb.grad(n.out[0])}, {dx}, n.name + ".backward");
  gb.add_grad(x, dx);
}

void run(const StepArgs& a) {
  const Value& x = a.in_value(0);
  a.backend->relayout(a.out<void>(), a.out_value().dtype, a.in<void>(0), x.dtype, image_shape(x, a.n),
                      target(*a.node), a.accumulate);
}

}  // namespace

// Layouts::Any: a conversion's node layout is its output's, and no row adapts around it.
const OpDef kToNhwc = OpDef("to_nhwc", infer).with_backward(backward).with_recompute(ops::recompute_clone)
                      .with_layouts(Layouts::Any);
const OpDef kToNchw = OpDef("to_nchw", infer).with_backward(backward).with_recompute(ops::recompute_clone)
                      .with_layouts(Layouts::Any);

const OpDef& layout_conversion(Layout to) { return to == Layout::NHWC ? kToNhwc : kToNchw; }

// CUDA runs no float64 graphs.
CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  for (const OpDef* op : {&kToNhwc, &kToNchw}) {
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) t.add(*op, Device::CPU, dt, OpImpl(run));
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) t.add(*op, Device::CUDA, dt, OpImpl(run));
  }
}

namespace nn {
ValueId to_layout(Graph& g, ValueId x, Layout to, const std::string& name) {
  return g.apply(layout_conversion(to), {x}, name);
}
}  // namespace nn

}  // namespace crumb
