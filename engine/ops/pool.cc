// Pooling on NCHW: max and average over kh x kw windows (floor output size, PyTorch's ceil_mode=False),
// global average pooling [n, c, h, w] -> [n, c], and adaptive average pooling to a fixed output size
// (PyTorch's bins, which also upsample a smaller input). The forward shape rules compute the geometry
// (cpu::Pool2dShape, GlobalPoolGeometry); the backward nodes carry it. The declarations, their CPU
// rows and graph builders; the CUDA rows are at the end, in CUDA builds.
#include "engine/ops/pool.h"

#include "engine/graph/autograd.h"
#include "engine/base/registry.h"
#include "kernels/pool.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#include "kernels/elementwise.h"
#include "kernels/cuda/reduce.h"
#endif

namespace crumb {
namespace {

Dims in_dims(const cpu::Pool2dShape& s) { return {s.c, s.h, s.w}; }
Dims out_dims(const cpu::Pool2dShape& s) { return {s.c, s.h_out, s.w_out}; }

void check_image(const Node& n, const Value& xv) {
  if (!xv.batched || xv.dims.size() != 3)
    ops::fail(n, "input '" + xv.name + "' must be [batch, channels, height, width], got per-sample " + dims_str(xv.dims));
}

cpu::Pool2dShape check_pool(const Node& n, const Value& xv) {
  const WindowAttrs& a = ops::attrs<WindowAttrs>(n);
  check_image(n, xv);
  if (a.kh < 1 || a.kw < 1 || a.stride_h < 1 || a.stride_w < 1 || a.pad_h < 0 || a.pad_w < 0)
    ops::fail(n, "kernel and stride must be >= 1, padding >= 0");
  if (2 * int64_t{a.pad_h} > a.kh || 2 * int64_t{a.pad_w} > a.kw) ops::fail(n, "padding must be at most half the kernel size");
  if (xv.dims[2] > cpu::kMaxPoolWidth)
    ops::fail(n, "input width " + std::to_string(xv.dims[2]) + " exceeds the supported " +
                     std::to_string(cpu::kMaxPoolWidth));
  if (xv.dims[1] + 2 * int64_t{a.pad_h} < a.kh || xv.dims[2] + 2 * int64_t{a.pad_w} < a.kw)
    ops::fail(n, "window " + std::to_string(a.kh) + "x" + std::to_string(a.kw) + " is larger than the input " +
                     dims_str(xv.dims));
  cpu::Pool2dShape s{};
  ops::set_window(n, s, xv.dims, a, 1);
  s.c = (int)xv.dims[0];
  return s;
}

// Max pooling: out[0] = y, out[1] = the argmax of each window (U8 offset inside the window).
void infer_max(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(2));
  const cpu::Pool2dShape s = check_pool(n, g.value(n.in[0]));
  if (int64_t{s.kh} * s.kw > 256) ops::fail(n, "windows larger than 256 elements are not supported");
  n.geometry = s;
  ops::set_out_dims(g, n, 0, out_dims(s));
  ops::set_out_dims(g, n, 1, out_dims(s));
}

void infer_avg(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(1));
  const cpu::Pool2dShape s = check_pool(n, g.value(n.in[0]));
  n.geometry = s;
  ops::set_out_dims(g, n, 0, out_dims(s));
}

// Backward ops: in[0] = dy (max: in[1] = argmax); dx (out[0]) has x's dims.
void infer_bwd(Graph& g, Node& n) {
  const size_t ins = n.def == &kMaxPool2dBwd ? 2 : 1;
  ops::expect_arity(n, ops::inputs(ins), ops::outputs(1));
  const cpu::Pool2dShape& s = ops::geometry<cpu::Pool2dShape>(n);
  if (g.value(n.in[0]).dims != out_dims(s)) ops::fail(n, "gradient shape mismatch");
  if (ins == 2 && g.value(n.in[1]).dims != out_dims(s)) ops::fail(n, "argmax shape mismatch");
  ops::set_out_dims(g, n, 0, in_dims(s));
}

// Max, average and adaptive average pooling: dx from dy (and the max pool's argmax).
void pool_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  if (n.def == &kMaxPool2d)
    gb.emit(kMaxPool2dBwd, {gb.grad(n.out[0]), n.out[1]}, {dx}, n.name + ".backward", n.attrs, n.geometry);
  else
    gb.emit(n.def == &kAvgPool2d ? kAvgPool2dBwd : kAdaptiveAvgPool2dBwd, {gb.grad(n.out[0])}, {dx},
            n.name + ".backward", n.attrs, n.geometry);
  gb.add_grad(x, dx);
}

cpu::Pool2dShape shape(const StepArgs& a) { return ops::at_batch<cpu::Pool2dShape>(*a.node, a.n); }

template <class T> void max_fwd_cpu(const StepArgs& a) {
  cpu::max_pool2d_forward<T>(a.out<T>(0), a.out<uint8_t>(1), a.in<T>(0), shape(a));
}
template <class T> void max_bwd_cpu(const StepArgs& a) {
  cpu::max_pool2d_backward<T>(a.out<T>(), a.in<T>(0), a.in<uint8_t>(1), shape(a), a.accumulate);
}
template <class T> void avg_fwd_cpu(const StepArgs& a) { cpu::avg_pool2d_forward<T>(a.out<T>(), a.in<T>(0), shape(a)); }
template <class T> void avg_bwd_cpu(const StepArgs& a) {
  cpu::avg_pool2d_backward<T>(a.out<T>(), a.in<T>(0), shape(a), a.accumulate);
}

// ---- global average pool
void infer_gap(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(1));
  const Value& x = g.value(n.in[0]);
  check_image(n, x);
  n.geometry = GlobalPoolGeometry{(int)x.dims[0], (int)(x.dims[1] * x.dims[2])};
  ops::set_out_dims(g, n, 0, {x.dims[0]});
}

void infer_gap_bwd(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(1));
  const GlobalPoolGeometry& s = ops::geometry<GlobalPoolGeometry>(n);
  const Dims& dx = g.value(n.out[0]).dims;
  if (dx.size() != 3 || dx[0] != s.c || dx[1] * dx[2] != s.hw || g.value(n.in[0]).dims != Dims{s.c})
    ops::fail(n, "gradient shape mismatch");
}

void gap_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  gb.emit(kGlobalAvgPoolBwd, {gb.grad(n.out[0])}, {dx}, n.name + ".backward", {}, n.geometry);
  gb.add_grad(x, dx);
}

template <class T> void gap_fwd_cpu(const StepArgs& a) {
  const GlobalPoolGeometry& s = ops::geometry<GlobalPoolGeometry>(*a.node);
  cpu::global_avg_pool_forward<T>(a.out<T>(), a.in<T>(0), a.n, s.c, s.hw);
}
template <class T> void gap_bwd_cpu(const StepArgs& a) {
  const GlobalPoolGeometry& s = ops::geometry<GlobalPoolGeometry>(*a.node);
  cpu::global_avg_pool_backward<T>(a.out<T>(), a.in<T>(0), a.n, s.c, s.hw, a.accumulate);
}

// ---- adaptive average pool
void infer_adaptive(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(1));
  const AdaptivePoolAttrs& a = ops::attrs<AdaptivePoolAttrs>(n);
  const Value& x = g.value(n.in[0]);
  check_image(n, x);
  if (a.h_out < 1 || a.w_out < 1)
    ops::fail(n, "output size must be at least 1x1, got " + std::to_string(a.h_out) + "x" + std::to_string(a.w_out));
  n.geometry = cpu::AdaptivePool2dShape{1, (int)x.dims[0], (int)x.dims[1], (int)x.dims[2], a.h_out, a.w_out};
  ops::set_out_dims(g, n, 0, {x.dims[0], a.h_out, a.w_out});
}

void infer_adaptive_bwd(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(1));
  const cpu::AdaptivePool2dShape& s = ops::geometry<cpu::AdaptivePool2dShape>(n);
  if (g.value(n.in[0]).dims != Dims{s.c, s.h_out, s.w_out}) ops::fail(n, "gradient shape mismatch");
  ops::set_out_dims(g, n, 0, {s.c, s.h, s.w});
}

cpu::AdaptivePool2dShape adaptive_shape(const StepArgs& a) { return ops::at_batch<cpu::AdaptivePool2dShape>(*a.node, a.n); }

template <class T> void adaptive_fwd_cpu(const StepArgs& a) {
  cpu::adaptive_avg_pool2d_forward<T>(a.out<T>(), a.in<T>(0), adaptive_shape(a));
}
template <class T> void adaptive_bwd_cpu(const StepArgs& a) {
  cpu::adaptive_avg_pool2d_backward<T>(a.out<T>(), a.in<T>(0), adaptive_shape(a), a.accumulate);
}

}  // namespace

const OpDef kMaxPool2d = OpDef("max_pool2d", infer_max).with_backward(pool_backward)
                         .with_outputs({OutDType::Float, OutDType::U8}).with_recompute(ops::recompute_clone)
                         .with_layouts(Layouts::Nhwc);
const OpDef kMaxPool2dBwd = OpDef("max_pool2d_backward", infer_bwd).with_layouts(Layouts::Nhwc);
const OpDef kAvgPool2d = OpDef("avg_pool2d", infer_avg).with_backward(pool_backward)
                         .with_recompute(ops::recompute_clone).with_layouts(Layouts::Nhwc);
const OpDef kAvgPool2dBwd = OpDef("avg_pool2d_backward", infer_bwd).with_layouts(Layouts::Nhwc);
const OpDef kGlobalAvgPool = OpDef("global_avg_pool", infer_gap).with_backward(gap_backward)
                             .with_recompute(ops::recompute_clone).with_layouts(Layouts::Nhwc);
const OpDef kGlobalAvgPoolBwd = OpDef("global_avg_pool_backward", infer_gap_bwd).with_layouts(Layouts::Nhwc);
const OpDef kAdaptiveAvgPool2d = OpDef("adaptive_avg_pool2d", infer_adaptive).with_backward(pool_backward)
                                 .with_recompute(ops::recompute_clone).with_layouts(Layouts::Nhwc);
const OpDef kAdaptiveAvgPool2dBwd = OpDef("adaptive_avg_pool2d_backward", infer_adaptive_bwd)
                                    .with_layouts(Layouts::Nhwc);

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CPU_ROWS16(t, kMaxPool2d, max_fwd_cpu);
  CRUMB_CPU_ROWS16(t, kMaxPool2dBwd, max_bwd_cpu);
  CRUMB_CPU_ROWS16(t, kAvgPool2d, avg_fwd_cpu);
  CRUMB_CPU_ROWS16(t, kAvgPool2dBwd, avg_bwd_cpu);
  CRUMB_CPU_ROWS16(t, kGlobalAvgPool, gap_fwd_cpu);
  CRUMB_CPU_ROWS16(t, kGlobalAvgPoolBwd, gap_bwd_cpu);
  CRUMB_CPU_ROWS16(t, kAdaptiveAvgPool2d, adaptive_fwd_cpu);
  CRUMB_CPU_ROWS16(t, kAdaptiveAvgPool2dBwd, adaptive_bwd_cpu);
}

namespace nn {

ValueId max_pool2d(Graph& g, ValueId x, int kernel, int stride, const std::string& name, int pad) {
  return g.apply(kMaxPool2d, {x}, name, WindowAttrs::square(kernel, stride, pad));
}

ValueId avg_pool2d(Graph& g, ValueId x, int kernel, int stride, const std::string& name, int pad) {
  return g.apply(kAvgPool2d, {x}, name, WindowAttrs::square(kernel, stride, pad));
}

ValueId global_avg_pool(Graph& g, ValueId x, const std::string& name) { return g.apply(kGlobalAvgPool, {x}, name); }

ValueId adaptive_avg_pool2d(Graph& g, ValueId x, int h_out, int w_out, const std::string& name) {
  return g.apply(kAdaptiveAvgPool2d, {x}, name, AdaptivePoolAttrs{h_out, w_out});
}

}  // namespace nn

}  // namespace crumb

#if CRUMB_HAVE_CUDA
// Pooling's CUDA rows: custom kernels (kernels/cuda/pool.cu, reduce.cu) matching the CPU's tie and NaN
// rules, on the compute stream, for float32 and 16-bit graphs.
namespace crumb::cuda_rows {

namespace {

cudaStream_t stream(const StepArgs& a) { return cuda::CudaBackend::of(a).compute(); }
// The kernels take the node's layout: pooling runs natively in channels-last plans (global average
// pooling, whose output is 1x1, runs on NCHW copies).
template <class Shape> Shape shape_of(const StepArgs& a) {
  Shape s = ops::at_batch<Shape>(*a.node, a.n);
  s.layout = a.node->layout;
  return s;
}
cpu::Pool2dShape shape(const StepArgs& a) { return shape_of<cpu::Pool2dShape>(a); }

template <class T> void max_fwd(const StepArgs& a) {
  cuda::max_pool2d_forward(a.out<T>(0), a.out<uint8_t>(1), a.in<T>(0), shape(a), stream(a));
}
template <class T> void max_bwd(const StepArgs& a) {
  cuda::max_pool2d_backward(a.out<T>(), a.in<T>(0), a.in<uint8_t>(1), shape(a), a.accumulate, stream(a));
}
template <class T> void avg_fwd(const StepArgs& a) {
  cuda::avg_pool2d_forward(a.out<T>(), a.in<T>(0), shape(a), stream(a));
}
template <class T> void avg_bwd(const StepArgs& a) {
  cuda::avg_pool2d_backward(a.out<T>(), a.in<T>(0), shape(a), a.accumulate, stream(a));
}
template <class T> void gap_fwd(const StepArgs& a) {
  const GlobalPoolGeometry& s = ops::geometry<GlobalPoolGeometry>(*a.node);
  cuda::global_avg_pool_forward(a.out<T>(), a.in<T>(0), a.n, s.c, s.hw, stream(a));
}
template <class T> void gap_bwd(const StepArgs& a) {
  const GlobalPoolGeometry& s = ops::geometry<GlobalPoolGeometry>(*a.node);
  cuda::global_avg_pool_backward(a.out<T>(), a.in<T>(0), a.n, s.c, s.hw, a.accumulate, stream(a));
}

cpu::AdaptivePool2dShape adaptive_shape(const StepArgs& a) { return shape_of<cpu::AdaptivePool2dShape>(a); }
template <class T> void adaptive_fwd(const StepArgs& a) {
  cuda::adaptive_avg_pool2d_forward(a.out<T>(), a.in<T>(0), adaptive_shape(a), stream(a));
}
template <class T> void adaptive_bwd(const StepArgs& a) {
  cuda::adaptive_avg_pool2d_backward(a.out<T>(), a.in<T>(0), adaptive_shape(a), a.accumulate, stream(a));
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CUDA_ROWS(t, kMaxPool2d, max_fwd, .with_nhwc(true));
  CRUMB_CUDA_ROWS(t, kMaxPool2dBwd, max_bwd, .with_nhwc(true));
  CRUMB_CUDA_ROWS(t, kAvgPool2d, avg_fwd, .with_nhwc(true));
  CRUMB_CUDA_ROWS(t, kAvgPool2dBwd, avg_bwd, .with_nhwc(true));
  CRUMB_CUDA_ROWS(t, kGlobalAvgPool, gap_fwd);
  CRUMB_CUDA_ROWS(t, kGlobalAvgPoolBwd, gap_bwd);
  CRUMB_CUDA_ROWS(t, kAdaptiveAvgPool2d, adaptive_fwd, .with_nhwc(true));
  CRUMB_CUDA_ROWS(t, kAdaptiveAvgPool2dBwd, adaptive_bwd, .with_nhwc(true));
}

}  // namespace crumb::cuda_rows
#endif  // CRUMB_HAVE_CUDA
