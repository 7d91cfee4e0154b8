// Elementwise ops: ReLU, LeakyReLU and Hardtanh (in place when the planner allows), add (also sums gradients), reshape (a view),
// and the casts between a mixed-precision graph's float32 inputs and its 16-bit activations.
// The declarations, their CPU rows and graph builders; the CUDA rows are at the end, in CUDA builds.
#include "engine/ops/elementwise.h"

#include <cmath>

#include "engine/graph/autograd.h"
#include "engine/graph/graph_ops.h"
#include "engine/base/registry.h"
#include "engine/device/backend.h"
#include "kernels/elementwise.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace crumb {
namespace {

using ops::out_count;

using ops::infer_same;

void relu_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0], y = n.out[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  // Uses y rather than x so the forward can overwrite x in place.
  gb.emit(kReluBwd, {gb.grad(y), y}, {dx}, n.name + ".backward");
  gb.add_grad(x, dx);
}

// The activations whose backward reads their output: dx = f'(y) dy, emitted as `bwd` with the node's
// attributes, so the forward may overwrite x in place.
template <const OpDef& Bwd> void activation_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0], y = n.out[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  gb.emit(Bwd, {gb.grad(y), y}, {dx}, n.name + ".backward", n.attrs);
  gb.add_grad(x, dx);
}

void infer_leaky_relu(Graph& g, Node& n) {
  const double s = ops::attrs<LeakyReluAttrs>(n).negative_slope;
  if (!(s >= 0) || !std::isfinite(s)) ops::fail(n, "negative_slope must be a finite number >= 0, got " + std::to_string(s));
  infer_same(g, n);
}

void infer_hardtanh(Graph& g, Node& n) {
  const HardtanhAttrs& a = ops::attrs<HardtanhAttrs>(n);
  if (!(a.min_val < a.max_val) || !std::isfinite(a.min_val) || !std::isfinite(a.max_val))
    ops::fail(n, "min_val must be below max_val (both finite), got " + std::to_string(a.min_val) + " and " +
                     std::to_string(a.max_val));
  infer_same(g, n);
}

double slope(const StepArgs& a) { return ops::attrs<LeakyReluAttrs>(*a.node).negative_slope; }
const HardtanhAttrs& bounds(const StepArgs& a) { return ops::attrs<HardtanhAttrs>(*a.node); }

template <class T> void leaky_relu_fwd_cpu(const StepArgs& a) {
  cpu::leaky_relu_forward<T>(a.out<T>(), a.in<T>(0), out_count(a), slope(a));
}
template <class T> void leaky_relu_bwd_cpu(const StepArgs& a) {
  cpu::leaky_relu_backward<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), out_count(a), slope(a), a.accumulate);
}
template <class T> void hardtanh_fwd_cpu(const StepArgs& a) {
  cpu::hardtanh_forward<T>(a.out<T>(), a.in<T>(0), out_count(a), bounds(a).min_val, bounds(a).max_val);
}
template <class T> void hardtanh_bwd_cpu(const StepArgs& a) {
  cpu::hardtanh_backward<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), out_count(a), bounds(a).min_val, bounds(a).max_val,
                            a.accumulate);
}

template <class T> void relu_fwd_cpu(const StepArgs& a) { cpu::relu_forward<T>(a.out<T>(), a.in<T>(0), out_count(a)); }
template <class T> void relu_bwd_cpu(const StepArgs& a) {
  cpu::relu_backward<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), out_count(a), a.accumulate);
}

template <class T> void add_cpu(const StepArgs& a) {
  cpu::add_forward<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), out_count(a));
}

void infer_reshape(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(1));
  const Value& x = g.value(n.in[0]);
  const Dims& to = ops::attrs<ReshapeAttrs>(n).dims;
  if (dims_count(to) != dims_count(x.dims))
    ops::fail(n, "cannot reshape per-sample " + dims_str(x.dims) + " to " + dims_str(to));
  ops::set_out_dims(g, n, 0, to);
}

void reshape_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  gb.emit(kReshape, {gb.grad(n.out[0])}, {dx}, n.name + ".backward", ReshapeAttrs{gb.graph().value(x).dims});
  gb.add_grad(x, dx);
}

// Any device: the backend converts (kernels/convert.h), in order with the rest of the step's work.
void cast_run(const StepArgs& a) {
  a.backend->convert(a.out<void>(), a.out_value().dtype, a.in<void>(0), a.in_value(0).dtype, out_count(a));
}

}  // namespace

const OpDef kRelu = OpDef("relu", infer_same).with_backward(relu_backward).with_inplace(true)
                    .with_recompute(ops::recompute_clone).with_layouts(Layouts::Any);
const OpDef kReluBwd = OpDef("relu_backward", infer_same).with_inplace(true).with_layouts(Layouts::Any);
const OpDef kLeakyReluBwd = OpDef("leaky_relu_backward", infer_leaky_relu).with_inplace(true)
                            .with_layouts(Layouts::Any);
const OpDef kLeakyRelu = OpDef("leaky_relu", infer_leaky_relu).with_backward(activation_backward<kLeakyReluBwd>)
                         .with_inplace(true).with_recompute(ops::recompute_clone).with_layouts(Layouts::Any);
const OpDef kHardtanhBwd = OpDef("hardtanh_backward", infer_hardtanh).with_inplace(true).with_layouts(Layouts::Any);
const OpDef kHardtanh = OpDef("hardtanh", infer_hardtanh).with_backward(activation_backward<kHardtanhBwd>)
                        .with_inplace(true).with_recompute(ops::recompute_clone).with_layouts(Layouts::Any);
const OpDef kReshape = OpDef("reshape", infer_reshape).with_backward(reshape_backward).with_view(true)
                       .with_recompute(ops::recompute_clone);

// Reshape is a view: it has no rows on any device.
CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CPU_ROWS16(t, kRelu, relu_fwd_cpu);
  CRUMB_CPU_ROWS16(t, kReluBwd, relu_bwd_cpu);
  CRUMB_CPU_ROWS16(t, kLeakyRelu, leaky_relu_fwd_cpu);
  CRUMB_CPU_ROWS16(t, kLeakyReluBwd, leaky_relu_bwd_cpu);
  CRUMB_CPU_ROWS16(t, kHardtanh, hardtanh_fwd_cpu);
  CRUMB_CPU_ROWS16(t, kHardtanhBwd, hardtanh_bwd_cpu);
  CRUMB_CPU_ROWS16(t, kAdd, add_cpu);
  // The casts exist in mixed-precision graphs only; their one run serves every device.
  for (Device d : {Device::CPU, Device::CUDA})
    for (DType dt : {DType::BF16, DType::F16}) {
      t.add(kCast, d, dt, OpImpl(cast_run));
      t.add(kCastMaster, d, dt, OpImpl(cast_run));
    }
}

namespace nn {

ValueId relu(Graph& g, ValueId x, const std::string& name) { return g.apply(kRelu, {x}, name); }

ValueId leaky_relu(Graph& g, ValueId x, double negative_slope, const std::string& name) {
  return g.apply(kLeakyRelu, {x}, name, LeakyReluAttrs{negative_slope});
}

ValueId hardtanh(Graph& g, ValueId x, double min_val, double max_val, const std::string& name) {
  return g.apply(kHardtanh, {x}, name, HardtanhAttrs{min_val, max_val});
}

ValueId flatten(Graph& g, ValueId x, const std::string& name) {
  return g.apply(kReshape, {x}, name, ReshapeAttrs{{dims_count(g.value(x).dims)}});
}

ValueId reshape(Graph& g, ValueId x, const Dims& dims, const std::string& name) {
  return g.apply(kReshape, {x}, name, ReshapeAttrs{dims});
}

ValueId add(Graph& g, ValueId a, ValueId b, const std::string& name) { return g.apply(kAdd, {a, b}, name); }

}  // namespace nn

}  // namespace crumb

#if CRUMB_HAVE_CUDA
// Elementwise ops' CUDA rows: custom kernels (kernels/cuda/elementwise.cu) on the compute stream, for
// float32 and 16-bit graphs.
namespace crumb::cuda_rows {

namespace {

using ops::out_count;

template <class T> void relu_fwd(const StepArgs& a) {
  cuda::relu_forward(a.out<T>(), a.in<T>(0), out_count(a), cuda::CudaBackend::of(a).compute());
}
template <class T> void relu_bwd(const StepArgs& a) {
  cuda::relu_backward(a.out<T>(), a.in<T>(0), a.in<T>(1), out_count(a), a.accumulate,
                      cuda::CudaBackend::of(a).compute());
}
float slope(const StepArgs& a) { return static_cast<float>(ops::attrs<LeakyReluAttrs>(*a.node).negative_slope); }
float lo(const StepArgs& a) { return static_cast<float>(ops::attrs<HardtanhAttrs>(*a.node).min_val); }
float hi(const StepArgs& a) { return static_cast<float>(ops::attrs<HardtanhAttrs>(*a.node).max_val); }

template <class T> void leaky_relu_fwd(const StepArgs& a) {
  cuda::leaky_relu_forward(a.out<T>(), a.in<T>(0), out_count(a), slope(a), cuda::CudaBackend::of(a).compute());
}
template <class T> void leaky_relu_bwd(const StepArgs& a) {
  cuda::leaky_relu_backward(a.out<T>(), a.in<T>(0), a.in<T>(1), out_count(a), slope(a), a.accumulate,
                            cuda::CudaBackend::of(a).compute());
}
template <class T> void hardtanh_fwd(const StepArgs& a) {
  cuda::hardtanh_forward(a.out<T>(), a.in<T>(0), out_count(a), lo(a), hi(a), cuda::CudaBackend::of(a).compute());
}
template <class T> void hardtanh_bwd(const StepArgs& a) {
  cuda::hardtanh_backward(a.out<T>(), a.in<T>(0), a.in<T>(1), out_count(a), lo(a), hi(a), a.accumulate,
                          cuda::CudaBackend::of(a).compute());
}
template <class T> void add(const StepArgs& a) {
  cuda::add_forward(a.out<T>(), a.in<T>(0), a.in<T>(1), out_count(a), cuda::CudaBackend::of(a).compute());
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CUDA_ROWS(t, kRelu, relu_fwd);
  CRUMB_CUDA_ROWS(t, kReluBwd, relu_bwd);
  CRUMB_CUDA_ROWS(t, kLeakyRelu, leaky_relu_fwd);
  CRUMB_CUDA_ROWS(t, kLeakyReluBwd, leaky_relu_bwd);
  CRUMB_CUDA_ROWS(t, kHardtanh, hardtanh_fwd);
  CRUMB_CUDA_ROWS(t, kHardtanhBwd, hardtanh_bwd);
  CRUMB_CUDA_ROWS(t, kAdd, add);
}

}  // namespace crumb::cuda_rows
#endif  // CRUMB_HAVE_CUDA
