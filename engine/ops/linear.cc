// linear: y [n, out] = x [n, in] w^T + b, with w [out, in] (PyTorch's layout and parameter names).
// The declaration, its CPU rows and its graph builder; the CUDA rows are at the end, in CUDA builds.
#include "engine/ops/linear.h"

#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/device/widen.h"
#include "engine/graph/fusion.h"
#include "engine/ops/relu_epilogue.h"
#include "kernels/linear.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#include "kernels/cuda/blas.h"
#include "kernels/elementwise.h"
#endif

namespace crumb {
namespace {

void check_weight(const Graph& g, const Node& n, ValueId x, ValueId w, int bias_at) {
  const Value& xv = g.value(x);
  const Value& wv = g.value(w);
  if (!xv.batched || xv.dims.size() != 1)
    ops::fail(n, "input '" + xv.name + "' must be [batch, features], got per-sample " + dims_str(xv.dims) +
                     " (insert a flatten)");
  if (wv.dims.size() != 2 || wv.dims[1] != xv.dims[0])
    ops::fail(n, "weight " + dims_str(wv.dims) + " does not take " + std::to_string(xv.dims[0]) + " input features");
  if (bias_at >= 0 && (int)n.in.size() > bias_at && g.value(n.in[bias_at]).dims != Dims{wv.dims[0]})
    ops::fail(n, "bias " + dims_str(g.value(n.in[bias_at]).dims) + " must be [" + std::to_string(wv.dims[0]) + "]");
}

void infer_fwd(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(2, 3), ops::outputs(1));
  check_weight(g, n, n.in[0], n.in[1], 2);
  const Dims& w = g.value(n.in[1]).dims;
  n.geometry = LinearGeometry{(int)w[1], (int)w[0]};
  ops::set_out_dims(g, n, 0, {w[0]});
}

void infer_bwd_data(Graph& g, Node& n) {  // in: dy, w  out: dx
  ops::expect_arity(n, ops::inputs(2), ops::outputs(1));
  const LinearGeometry& s = ops::geometry<LinearGeometry>(n);
  if (g.value(n.in[1]).dims != Dims{s.out, s.in} || g.value(n.in[0]).dims != Dims{s.out})
    ops::fail(n, "gradient does not match the weight");
  ops::set_out_dims(g, n, 0, {s.in});
}

void infer_bwd_weight(Graph& g, Node& n) {  // in: dy, x  out: dw [, db]
  if (n.in.size() != 2 || n.out.empty() || n.out.size() > 2) ops::fail(n, "expects (dy, x) -> (dw[, db])");
  const LinearGeometry& s = ops::geometry<LinearGeometry>(n);
  if (g.value(n.in[0]).dims != Dims{s.out} || g.value(n.in[1]).dims != Dims{s.in})
    ops::fail(n, "gradient or input does not match the weight");
  ops::set_out_dims(g, n, 0, {s.out, s.in});
  if (n.out.size() == 2) ops::set_out_dims(g, n, 1, {s.out});
}

void backward(GradBuilder& gb, const Node& n) { ops::weighted_backward(gb, n, kLinearBwdData, kLinearBwdWeight); }

bool relu_epilogue(const Node& n) {
  const auto* a = std::any_cast<LinearAttrs>(&n.attrs);
  return a && a->relu;
}

template <class T>
void fwd_cpu(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  cpu::linear_forward<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), a.node->in.size() == 3 ? a.in<T>(2) : nullptr, a.n, s.in,
                         s.out, static_cast<T*>(a.workspace), relu_epilogue(*a.node));
}

// The operands rearranged for the forward or the data gradient, in the dtype the row computes in.
std::size_t fwd_workspace(const Graph& g, const Node& n, int batch, const OpState*) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(n);
  return cpu::linear_forward_workspace(batch, s.in, s.out) * dtype_size(g.master_dtype());
}
std::size_t bwd_data_workspace(const Graph& g, const Node& n, int, const OpState*) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(n);
  return cpu::linear_backward_data_workspace(s.in, s.out) * dtype_size(g.master_dtype());
}

// The bias is the parameter's bf16 copy, or float32 where the graph keeps it so.
void fwd_cpu_bf16(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  const bool relu = relu_epilogue(*a.node);
  if (a.node->in.size() == 3 && a.in_value(2).dtype == DType::F32) {
    cpu::linear_forward_bf16(a.out<bf16>(), a.in<bf16>(0), a.in<bf16>(1), a.in<float>(2), a.n, s.in, s.out, relu);
  } else {
    cpu::linear_forward_bf16(a.out<bf16>(), a.in<bf16>(0), a.in<bf16>(1),
                             a.node->in.size() == 3 ? a.in<bf16>(2) : nullptr, a.n, s.in, s.out, relu);
  }
}

// bf16 on AMX, all three passes, where the CPU has it (native_or_fallback, decided per node when the plan is
// compiled); else the forward on vdpbf16ps where the CPU has that, and the rest widened.
bool amx_forward(const Graph& g, const Node& n) {
  return cpu::uses_amx() && all_of_dtype(g, {n.in[0], n.in[1]}, DType::BF16) && all_of_dtype(g, n.out, DType::BF16);
}
bool amx_data(const Graph& g, const Node& n) {
  return cpu::uses_amx() && all_of_dtype(g, n.in, DType::BF16) && all_of_dtype(g, n.out, DType::BF16);
}
bool amx_weight(const Graph& g, const Node& n) {
  return cpu::uses_amx() && all_of_dtype(g, n.in, DType::BF16) && all_of_dtype(g, n.out, DType::F32);
}
std::size_t amx_workspace(const Graph&, const Node& n, int batch) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(n);
  return cpu::linear_amx_workspace(batch, s.in, s.out) * sizeof(bf16);
}
void fwd_amx(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  auto* ws = static_cast<bf16*>(a.workspace);
  const bool relu = relu_epilogue(*a.node);
  if (a.node->in.size() == 3 && a.in_value(2).dtype == DType::F32) {
    cpu::linear_forward_amx(a.out<bf16>(), a.in<bf16>(0), a.in<bf16>(1), a.in<float>(2), a.n, s.in, s.out, ws, relu);
  } else {
    cpu::linear_forward_amx(a.out<bf16>(), a.in<bf16>(0), a.in<bf16>(1), a.node->in.size() == 3 ? a.in<bf16>(2) : nullptr,
                            a.n, s.in, s.out, ws, relu);
  }
}
void data_amx(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  cpu::linear_backward_data_amx(a.out<bf16>(), a.in<bf16>(0), a.in<bf16>(1), a.n, s.in, s.out,
                                static_cast<bf16*>(a.workspace), a.accumulate);
}
void weight_amx(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  cpu::linear_backward_weight_amx(a.out<float>(0), a.node->out.size() == 2 ? a.out<float>(1) : nullptr,
                                  a.in<bf16>(0), a.in<bf16>(1), a.n, s.in, s.out, static_cast<bf16*>(a.workspace),
                                  a.accumulate);
}
OpImpl forward_bf16_fallback() { return cpu::has_bf16_dot() ? OpImpl(fwd_cpu_bf16) : widened_in_slices(); }

template <class T>
void bwd_data_cpu(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  cpu::linear_backward_data<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), a.n, s.in, s.out, static_cast<T*>(a.workspace),
                               a.accumulate);
}

template <class T>
void bwd_weight_cpu(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  cpu::linear_backward_weight<T>(a.out<T>(0), a.node->out.size() == 2 ? a.out<T>(1) : nullptr, a.in<T>(0),
                                 a.in<T>(1), a.n, s.in, s.out, a.accumulate);
}

// One [batch, in] x [in, out] product in every pass.
double flops(const Graph&, const Node& n, int batch) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(n);
  return 2.0 * batch * s.in * s.out;
}

}  // namespace

const OpDef kLinear = OpDef("linear", infer_fwd).with_backward(backward).with_recompute(ops::recompute_clone)
                          .with_flops(flops);
const OpDef kLinearBwdData = OpDef("linear_backward_data", infer_bwd_data).with_flops(flops);
const OpDef kLinearBwdWeight = OpDef("linear_backward_weight", infer_bwd_weight)
                               .with_outputs({OutDType::Float, OutDType::Float}).with_required_outputs(1).with_flops(flops);

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CPU_ROWS(t, kLinear, fwd_cpu, .with_workspace(fwd_workspace));
  CRUMB_CPU_ROWS(t, kLinearBwdData, bwd_data_cpu, .with_workspace(bwd_data_workspace));
  CRUMB_CPU_ROWS(t, kLinearBwdWeight, bwd_weight_cpu);
  // bf16 on AMX or vdpbf16ps where the CPU has them (above), fp16 widened.
  t.add(kLinear, Device::CPU, DType::BF16, native_or_fallback<amx_forward, fwd_amx, amx_workspace, forward_bf16_fallback>());
  t.add(kLinearBwdData, Device::CPU, DType::BF16, native_or_fallback<amx_data, data_amx, amx_workspace>());
  t.add(kLinearBwdWeight, Device::CPU, DType::BF16, native_or_fallback<amx_weight, weight_amx, amx_workspace>());
  for (const OpDef* op : {&kLinear, &kLinearBwdData, &kLinearBwdWeight}) t.add(*op, Device::CPU, DType::F16, widened_in_slices());
  add_fusion_rule({"linear+relu", 2, [](Graph& g) {
                     return fuse_relu_epilogue(g, kLinear, [](Node& n) { n.attrs = LinearAttrs{true}; });
                   }});
}

namespace nn {

ValueId linear(Graph& g, ValueId x, int out_features, const std::string& name, bool bias) {
  const Value& xv = g.value(x);
  CRUMB_CHECK(xv.dims.size() == 1, "layer '", name, "' (linear): input '", xv.name, "' must be [batch, features], got ",
              "per-sample ", dims_str(xv.dims), " (insert a flatten)");
  CRUMB_CHECK(out_features > 0, "layer '", name, "' (linear): out_features must be > 0");
  const int64_t in = xv.dims[0];
  std::vector<ValueId> ins{x, g.param(name + ".weight", {out_features, in}, {in})};
  if (bias) ins.push_back(g.param(name + ".bias", {out_features}, {in}));
  return g.apply(kLinear, ins, name);
}

}  // namespace nn

}  // namespace crumb

#if CRUMB_HAVE_CUDA
// linear's CUDA rows: cuBLAS GEMMs (kernels/cuda/blas.h) on the compute stream, TF32 when the graph
// allows it; in 16-bit graphs on tensor cores, with the weight gradient written in float32 by the GEMM.
namespace crumb::cuda_rows {

namespace {

// A fused ReLU epilogue as a pass of its own over the output (cuBLASLt's RELU_BIAS epilogue would store it
// clamped).
template <class T> void fwd(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  cuda::linear_forward<T>(cuda::CudaBackend::of(a).blas(), a.out<T>(), a.in<T>(0), a.in<T>(1),
                          a.node->in.size() == 3 ? a.in<T>(2) : nullptr, a.n, s.in, s.out, a.graph->tf32());
  if (relu_epilogue(*a.node))
    cuda::relu_forward(a.out<T>(), a.out<T>(), ops::out_count(a), cuda::CudaBackend::of(a).compute());
}
template <class T> void bwd_data(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  cuda::linear_backward_data<T>(cuda::CudaBackend::of(a).blas(), a.out<T>(), a.in<T>(0), a.in<T>(1), a.n, s.in,
                                s.out, a.accumulate, a.graph->tf32());
}
// dw and db are parameter gradients: float32 in every graph.
template <class T> void bwd_weight(const StepArgs& a) {
  const LinearGeometry& s = ops::geometry<LinearGeometry>(*a.node);
  cuda::linear_backward_weight<T>(cuda::CudaBackend::of(a).blas(), a.out<float>(0),
                                  a.node->out.size() == 2 ? a.out<float>(1) : nullptr, a.in<T>(0), a.in<T>(1), a.n,
                                  s.in, s.out, a.accumulate, a.graph->tf32());
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CUDA_ROWS(t, kLinear, fwd);
  CRUMB_CUDA_ROWS(t, kLinearBwdData, bwd_data);
  CRUMB_CUDA_ROWS(t, kLinearBwdWeight, bwd_weight);
}

}  // namespace crumb::cuda_rows
#endif  // CRUMB_HAVE_CUDA
