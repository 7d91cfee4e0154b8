// conv2d on NCHW: x [n, c_in, h, w], w [c_out, c_in, kh, kw], optional b [c_out].
#include "engine/ops/op.h"
#include "kernels/cpu/kernels.h"

namespace crumb {
namespace {

// The kernel shape from the (per-sample) input dims x, the weight dims and the attributes.
cpu::Conv2dShape conv_shape(const Dims& x, const Dims& w, const Attrs& a, int n) {
  cpu::Conv2dShape s{};
  ops::set_window(s, x, a, n);
  s.c_in = (int)x[0];
  s.c_out = (int)w[0];
  return s;
}

// Checks x against w and the attributes; returns the per-sample output dims.
Dims check_conv(const Node& n, const Value& xv, const Dims& w) {
  const Attrs& a = n.attrs;
  if (!xv.batched || xv.dims.size() != 3)
    ops::fail(n, "input '" + xv.name + "' must be [batch, channels, height, width], got per-sample " + dims_str(xv.dims));
  if (w.size() != 4 || w[0] <= 0 || w[2] != a.kh || w[3] != a.kw)
    ops::fail(n, "weight " + dims_str(w) + " does not match the kernel size");
  if (w[1] != xv.dims[0])
    ops::fail(n, "input has " + std::to_string(xv.dims[0]) + " channels but the weight " + dims_str(w) + " expects " +
                     std::to_string(w[1]));
  if (a.stride_h < 1 || a.stride_w < 1 || a.pad_h < 0 || a.pad_w < 0)
    ops::fail(n, "stride must be >= 1 and padding >= 0");
  if (xv.dims[1] + 2 * a.pad_h < a.kh || xv.dims[2] + 2 * a.pad_w < a.kw)
    ops::fail(n, "kernel " + std::to_string(a.kh) + "x" + std::to_string(a.kw) + " is larger than the padded input " +
                     dims_str(xv.dims));
  const cpu::Conv2dShape s = conv_shape(xv.dims, w, a, 1);
  return {w[0], s.h_out, s.w_out};
}

void infer_fwd(Graph& g, Node& n) {
  ops::expect_arity(n, 2, 3, 1);
  const Dims& w = g.value(n.in[1]).dims;
  const Dims y = check_conv(n, g.value(n.in[0]), w);
  if (n.in.size() == 3 && g.value(n.in[2]).dims != Dims{w[0]}) ops::fail(n, "bias must be [" + std::to_string(w[0]) + "]");
  ops::set_out_dims(g, n, 0, y);
}

void infer_bwd_data(Graph& g, Node& n) {  // in: dy, w  out: dx (dims preset from x)
  ops::expect_arity(n, 2, 2, 1);
  const Value& dx = g.value(n.out[0]);
  if (check_conv(n, dx, g.value(n.in[1]).dims) != g.value(n.in[0]).dims) ops::fail(n, "gradient shape mismatch");
}

void infer_bwd_weight(Graph& g, Node& n) {  // in: dy, x  out: dw [, db]
  if (n.in.size() != 2 || n.out.empty() || n.out.size() > 2) ops::fail(n, "expects (dy, x) -> (dw[, db])");
  const Dims& w = g.value(n.out[0]).dims;
  if (check_conv(n, g.value(n.in[1]), w) != g.value(n.in[0]).dims) ops::fail(n, "gradient shape mismatch");
  if (n.out.size() == 2) ops::set_out_dims(g, n, 1, {w[0]});
}

void backward(GradBuilder& gb, const Node& n) { ops::weighted_backward(gb, n, kConv2dBwdData, kConv2dBwdWeight); }

template <std::size_t (*Elems)(const cpu::Conv2dShape&)>
std::size_t workspace(const Graph& g, const Node& n, int batch) {
  return Elems(ops::conv2d_shape(g, n, batch)) * dtype_size(g.float_dtype());
}

template <class T>
void fwd_cpu(const StepArgs& a) {
  cpu::conv2d_forward<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), a.node->in.size() == 3 ? a.in<T>(2) : nullptr,
                         ops::conv2d_shape(*a.graph, *a.node, a.n), static_cast<T*>(a.workspace));
}

template <class T>
void bwd_data_cpu(const StepArgs& a) {
  cpu::conv2d_backward_data<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), ops::conv2d_shape(*a.graph, *a.node, a.n),
                               static_cast<T*>(a.workspace), a.accumulate);
}

template <class T>
void bwd_weight_cpu(const StepArgs& a) {
  cpu::conv2d_backward_weight<T>(a.out<T>(0), a.node->out.size() == 2 ? a.out<T>(1) : nullptr, a.in<T>(0), a.in<T>(1),
                                 ops::conv2d_shape(*a.graph, *a.node, a.n), static_cast<T*>(a.workspace), a.accumulate);
}

}  // namespace

cpu::Conv2dShape ops::conv2d_shape(const Graph& g, const Node& n, int batch) {
  // x is in[0] for the forward, in[1] for the backward-weight and out[0] (dx) for the backward-data.
  const ValueId x = n.def == &kConv2d ? n.in[0] : n.def == &kConv2dBwdWeight ? n.in[1] : n.out[0];
  const ValueId w = n.def == &kConv2dBwdWeight ? n.out[0] : n.in[1];
  return conv_shape(g.value(x).dims, g.value(w).dims, n.attrs, batch);
}

const OpDef kConv2d{"conv2d", infer_fwd, backward, workspace<cpu::conv2d_forward_workspace>, false, false,
                    CRUMB_CPU_IMPL(fwd_cpu)};
const OpDef kConv2dBwdData{"conv2d_backward_data", infer_bwd_data, nullptr,
                           workspace<cpu::conv2d_backward_data_workspace>, false, false, CRUMB_CPU_IMPL(bwd_data_cpu)};
const OpDef kConv2dBwdWeight{"conv2d_backward_weight", infer_bwd_weight, nullptr,
                             workspace<cpu::conv2d_backward_weight_workspace>, false, false,
                             CRUMB_CPU_IMPL(bwd_weight_cpu)};

}  // namespace crumb
