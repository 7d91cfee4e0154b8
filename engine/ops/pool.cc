// Pooling on NCHW: max and average over kh x kw windows (floor output size, PyTorch's ceil_mode=False),
// and global average pooling [n, c, h, w] -> [n, c].
#include "engine/autograd.h"
#include "engine/ops/op.h"
#include "kernels/cpu/kernels.h"

namespace crumb {
namespace {

cpu::Pool2dShape pool_shape(const Dims& x, const Attrs& a, int n) {
  cpu::Pool2dShape s{};
  ops::set_window(s, x, a, n);
  s.c = (int)x[0];
  return s;
}

Dims check_pool(const Node& n, const Value& xv) {
  const Attrs& a = n.attrs;
  if (!xv.batched || xv.dims.size() != 3)
    ops::fail(n, "input '" + xv.name + "' must be [batch, channels, height, width], got per-sample " + dims_str(xv.dims));
  if (a.kh < 1 || a.kw < 1 || a.stride_h < 1 || a.stride_w < 1 || a.pad_h < 0 || a.pad_w < 0)
    ops::fail(n, "kernel and stride must be >= 1, padding >= 0");
  if (2 * a.pad_h > a.kh || 2 * a.pad_w > a.kw) ops::fail(n, "padding must be at most half the kernel size");
  if (xv.dims[2] > cpu::kMaxPoolWidth)
    ops::fail(n, "input width " + std::to_string(xv.dims[2]) + " exceeds the supported " +
                     std::to_string(cpu::kMaxPoolWidth));
  if (xv.dims[1] + 2 * a.pad_h < a.kh || xv.dims[2] + 2 * a.pad_w < a.kw)
    ops::fail(n, "window " + std::to_string(a.kh) + "x" + std::to_string(a.kw) + " is larger than the input " +
                     dims_str(xv.dims));
  const cpu::Pool2dShape s = pool_shape(xv.dims, a, 1);
  return {xv.dims[0], s.h_out, s.w_out};
}

// Max pooling: out[0] = y, out[1] = the argmax of each window (U8 offset inside the window).
void infer_max(Graph& g, Node& n) {
  ops::expect_arity(n, 1, 1, 2);
  const Dims y = check_pool(n, g.value(n.in[0]));
  if (n.attrs.kh * n.attrs.kw > 256) ops::fail(n, "windows larger than 256 elements are not supported");
  if (g.value(n.out[1]).dtype != DType::U8) ops::fail(n, "the argmax output must be U8");
  ops::set_out_dims(g, n, 0, y);
  ops::set_out_dims(g, n, 1, y);
}

void infer_avg(Graph& g, Node& n) {
  ops::expect_arity(n, 1, 1, 1);
  ops::set_out_dims(g, n, 0, check_pool(n, g.value(n.in[0])));
}

// Backward ops: in[0] = dy (max: in[1] = argmax); dx (out[0]) has x's dims.
void infer_bwd(Graph& g, Node& n) {
  const size_t ins = n.def == &kMaxPool2dBwd ? 2 : 1;
  ops::expect_arity(n, ins, ins, 1);
  if (check_pool(n, g.value(n.out[0])) != g.value(n.in[0]).dims) ops::fail(n, "gradient shape mismatch");
  if (ins == 2 && g.value(n.in[1]).dims != g.value(n.in[0]).dims) ops::fail(n, "argmax shape mismatch");
}

void max_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  gb.emit(kMaxPool2dBwd, {gb.grad(n.out[0]), n.out[1]}, {dx}, n.name + ".backward", n.attrs);
  gb.add_grad(x, dx);
}

void avg_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  gb.emit(kAvgPool2dBwd, {gb.grad(n.out[0])}, {dx}, n.name + ".backward", n.attrs);
  gb.add_grad(x, dx);
}

cpu::Pool2dShape node_shape(const StepArgs& a) { return ops::pool2d_shape(*a.graph, *a.node, a.n); }

template <class T> void max_fwd_cpu(const StepArgs& a) {
  cpu::max_pool2d_forward<T>(a.out<T>(0), a.out<uint8_t>(1), a.in<T>(0), node_shape(a));
}
template <class T> void max_bwd_cpu(const StepArgs& a) {
  cpu::max_pool2d_backward<T>(a.out<T>(), a.in<T>(0), a.in<uint8_t>(1), node_shape(a), a.accumulate);
}
template <class T> void avg_fwd_cpu(const StepArgs& a) { cpu::avg_pool2d_forward<T>(a.out<T>(), a.in<T>(0), node_shape(a)); }
template <class T> void avg_bwd_cpu(const StepArgs& a) {
  cpu::avg_pool2d_backward<T>(a.out<T>(), a.in<T>(0), node_shape(a), a.accumulate);
}

// ---- global average pool
void infer_gap(Graph& g, Node& n) {
  ops::expect_arity(n, 1, 1, 1);
  const Value& x = g.value(n.in[0]);
  if (!x.batched || x.dims.size() != 3)
    ops::fail(n, "input '" + x.name + "' must be [batch, channels, height, width], got per-sample " + dims_str(x.dims));
  ops::set_out_dims(g, n, 0, {x.dims[0]});
}

void infer_gap_bwd(Graph& g, Node& n) {
  ops::expect_arity(n, 1, 1, 1);
  const Dims& dx = g.value(n.out[0]).dims;
  if (dx.size() != 3 || g.value(n.in[0]).dims != Dims{dx[0]}) ops::fail(n, "gradient shape mismatch");
}

void gap_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  gb.emit(kGlobalAvgPoolBwd, {gb.grad(n.out[0])}, {dx}, n.name + ".backward");
  gb.add_grad(x, dx);
}

std::pair<int, int> gap_dims(const StepArgs& a) { return ops::global_pool_dims(*a.graph, *a.node); }

template <class T> void gap_fwd_cpu(const StepArgs& a) {
  const auto [c, hw] = gap_dims(a);
  cpu::global_avg_pool_forward<T>(a.out<T>(), a.in<T>(0), a.n, c, hw);
}
template <class T> void gap_bwd_cpu(const StepArgs& a) {
  const auto [c, hw] = gap_dims(a);
  cpu::global_avg_pool_backward<T>(a.out<T>(), a.in<T>(0), a.n, c, hw, a.accumulate);
}

}  // namespace

cpu::Pool2dShape ops::pool2d_shape(const Graph& g, const Node& n, int batch) {
  return pool_shape(g.value(n.backward ? n.out[0] : n.in[0]).dims, n.attrs, batch);
}

std::pair<int, int> ops::global_pool_dims(const Graph& g, const Node& n) {
  const Dims& x = g.value(n.backward ? n.out[0] : n.in[0]).dims;
  return {(int)x[0], (int)(x[1] * x[2])};
}

const OpDef kMaxPool2d{"max_pool2d", infer_max, max_backward, nullptr, false, false, CRUMB_CPU_IMPL(max_fwd_cpu)};
const OpDef kMaxPool2dBwd{"max_pool2d_backward", infer_bwd, nullptr, nullptr, false, false, CRUMB_CPU_IMPL(max_bwd_cpu)};
const OpDef kAvgPool2d{"avg_pool2d", infer_avg, avg_backward, nullptr, false, false, CRUMB_CPU_IMPL(avg_fwd_cpu)};
const OpDef kAvgPool2dBwd{"avg_pool2d_backward", infer_bwd, nullptr, nullptr, false, false, CRUMB_CPU_IMPL(avg_bwd_cpu)};
const OpDef kGlobalAvgPool{"global_avg_pool", infer_gap, gap_backward, nullptr, false, false, CRUMB_CPU_IMPL(gap_fwd_cpu)};
const OpDef kGlobalAvgPoolBwd{"global_avg_pool_backward", infer_gap_bwd, nullptr, nullptr, false, false,
                              CRUMB_CPU_IMPL(gap_bwd_cpu)};

}  // namespace crumb
