// conv2d on NCHW: x [n, c_in, h, w], w [c_out, c_in / groups, kh, kw], optional b [c_out]. The shape rule of the
// forward computes the kernel geometry (cpu::Conv2dShape per sample); the backward nodes carry it.
// The declaration, its CPU rows (im2col + GEMM) and its graph builder; the CUDA rows (cuDNN) are at
// the end, in CUDA builds.
#include "engine/ops/conv2d.h"

#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "engine/device/widen.h"
#include "engine/graph/fusion.h"
#include "engine/ops/conv2d_algo.h"
#include "engine/ops/relu_epilogue.h"
#include "kernels/conv2d.h"
#include "kernels/elementwise.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#include "engine/device/widen.h"

#if CRUMB_HAVE_CUDNN
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/elementwise.h"
#endif
#endif

namespace crumb {
namespace {

// Checks x against w and the attributes; returns the geometry for one sample.
cpu::Conv2dShape check_conv(const Node& n, const Value& xv, const Dims& w) {
  const WindowAttrs& a = ops::attrs<WindowAttrs>(n);
  if (!xv.batched || xv.dims.size() != 3)
    ops::fail(n, "input '" + xv.name + "' must be [batch, channels, height, width], got per-sample " + dims_str(xv.dims));
  if (w.size() != 4 || w[0] <= 0 || w[2] != a.kh || w[3] != a.kw)
    ops::fail(n, "weight " + dims_str(w) + " does not match the kernel size");
  if (a.groups < 1 || xv.dims[0] % a.groups || w[0] % a.groups)
    ops::fail(n, "groups " + std::to_string(a.groups) + " must divide the input's " + std::to_string(xv.dims[0]) +
                     " channels and the weight's " + std::to_string(w[0]) + " output channels");
  if (w[1] * a.groups != xv.dims[0]) {
    const std::string in_groups = a.groups > 1 ? " (" + std::to_string(a.groups) + " groups)" : "";
    ops::fail(n, "input has " + std::to_string(xv.dims[0]) + " channels but the weight " + dims_str(w) + " expects " +
                     std::to_string(w[1] * a.groups) + in_groups);
  }
  if (a.stride_h < 1 || a.stride_w < 1 || a.pad_h < 0 || a.pad_w < 0)
    ops::fail(n, "stride must be >= 1 and padding >= 0");
  if (xv.dims[1] + 2 * int64_t{a.pad_h} < a.kh || xv.dims[2] + 2 * int64_t{a.pad_w} < a.kw)
    ops::fail(n, "kernel " + std::to_string(a.kh) + "x" + std::to_string(a.kw) + " is larger than the padded input " +
                     dims_str(xv.dims));
  cpu::Conv2dShape s{};
  ops::set_window(n, s, xv.dims, a, xv.dims[0]);
  s.c_in = (int)xv.dims[0];
  s.c_out = (int)w[0];
  s.groups = a.groups;
  return s;
}

Dims in_dims(const cpu::Conv2dShape& s) { return {s.c_in, s.h, s.w}; }
Dims out_dims(const cpu::Conv2dShape& s) { return {s.c_out, s.h_out, s.w_out}; }
Dims weight_dims(const cpu::Conv2dShape& s) { return {s.c_out, s.c_in / s.groups, s.kh, s.kw}; }

void infer_fwd(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(2, 3), ops::outputs(1));
  const cpu::Conv2dShape s = check_conv(n, g.value(n.in[0]), g.value(n.in[1]).dims);
  if (n.in.size() == 3 && g.value(n.in[2]).dims != Dims{s.c_out})
    ops::fail(n, "bias must be [" + std::to_string(s.c_out) + "]");
  n.geometry = s;
  ops::set_out_dims(g, n, 0, out_dims(s));
}

void infer_bwd_data(Graph& g, Node& n) {  // in: dy, w  out: dx (dims preset from x)
  ops::expect_arity(n, ops::inputs(2), ops::outputs(1));
  const cpu::Conv2dShape& s = ops::geometry<cpu::Conv2dShape>(n);
  if (g.value(n.in[0]).dims != out_dims(s) || g.value(n.in[1]).dims != weight_dims(s))
    ops::fail(n, "gradient or weight does not match the layer");
  ops::set_out_dims(g, n, 0, in_dims(s));
}

void infer_bwd_weight(Graph& g, Node& n) {  // in: dy, x  out: dw [, db]
  if (n.in.size() != 2 || n.out.empty() || n.out.size() > 2) ops::fail(n, "expects (dy, x) -> (dw[, db])");
  const cpu::Conv2dShape& s = ops::geometry<cpu::Conv2dShape>(n);
  if (g.value(n.in[0]).dims != out_dims(s) || g.value(n.in[1]).dims != in_dims(s))
    ops::fail(n, "gradient or input does not match the layer");
  ops::set_out_dims(g, n, 0, weight_dims(s));
  if (n.out.size() == 2) ops::set_out_dims(g, n, 1, {s.c_out});
}

void backward(GradBuilder& gb, const Node& n) { ops::weighted_backward(gb, n, kConv2dBwdData, kConv2dBwdWeight); }

cpu::Conv2dShape shape_of(const Node& n, int batch) {
  cpu::Conv2dShape s = ops::at_batch<cpu::Conv2dShape>(n, batch);
  s.lean = n.lean;
  return s;
}
cpu::Conv2dShape shape(const StepArgs& a) { return shape_of(*a.node, a.n); }

template <std::size_t (*Elems)(const cpu::Conv2dShape&)>
std::size_t workspace(const Graph& g, const Node& n, int batch, const OpState*) {
  return Elems(shape_of(n, batch)) * dtype_size(g.master_dtype());  // the row computes in it
}

// The forward and data-gradient passes of a stride-1 3x3 layer run Winograd where it was chosen for the
// node's shape (engine/ops/conv2d_algo.h), once per plan.
struct AlgoChoice : OpState {
  explicit AlgoChoice(bool w) : winograd(w) {}
  bool winograd;
};

bool winograd(const OpState* state) { return state && static_cast<const AlgoChoice*>(state)->winograd; }

template <ConvAlgoPass Pass> std::unique_ptr<OpState> choose(const Graph& g, const Node& n, int, Backend&) {
  return std::make_unique<AlgoChoice>(conv_runs_winograd(g, ops::geometry<cpu::Conv2dShape>(n), Pass));
}

template <std::size_t (*Default)(const cpu::Conv2dShape&), std::size_t (*Winograd)(const cpu::Conv2dShape&)>
std::size_t chosen_workspace(const Graph& g, const Node& n, int batch, const OpState* state) {
  const cpu::Conv2dShape s = ops::at_batch<cpu::Conv2dShape>(n, batch);
  return (winograd(state) ? Winograd(s) : Default(s)) * dtype_size(g.master_dtype());
}

bool relu_epilogue(const Node& n) { return ops::attrs<WindowAttrs>(n).relu; }

template <class T>
void fwd_cpu(const StepArgs& a) {
  const T* b = a.node->in.size() == 3 ? a.in<T>(2) : nullptr;
  const bool relu = relu_epilogue(*a.node);
  if (winograd(a.state)) {
    cpu::winograd_forward<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), b, shape(a), static_cast<T*>(a.workspace));
    // Winograd's output transform has no epilogue: its ReLU is a pass of its own.
    if (relu) cpu::relu_forward<T>(a.out<T>(), a.out<T>(), ops::out_count(a));
    return;
  }
  cpu::conv2d_forward<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), b, shape(a), static_cast<T*>(a.workspace), relu);
}

// bf16's forward on vdpbf16ps (kernels/conv2d.h; --conv-algo's Winograd is for the float32 rows); the
// bias is the parameter's bf16 copy, or float32 where the graph keeps it so.
void fwd_cpu_bf16(const StepArgs& a) {
  auto* ws = static_cast<bf16*>(a.workspace);
  const bool relu = relu_epilogue(*a.node);
  if (a.node->in.size() == 3 && a.in_value(2).dtype == DType::F32) {
    cpu::conv2d_forward_bf16(a.out<bf16>(), a.in<bf16>(0), a.in<bf16>(1), a.in<float>(2), shape(a), ws, relu);
  } else {
    cpu::conv2d_forward_bf16(a.out<bf16>(), a.in<bf16>(0), a.in<bf16>(1),
                             a.node->in.size() == 3 ? a.in<bf16>(2) : nullptr, shape(a), ws, relu);
  }
}
std::size_t bf16_workspace(const Graph&, const Node& n, int batch, const OpState*) {
  return cpu::conv2d_forward_bf16_workspace(shape_of(n, batch)) * sizeof(bf16);
}

// bf16's backward passes run natively where the CPU and the node allow it (native_or_fallback, else widened): the data
// gradient at stride 1 on vdpbf16ps (the forward's kernel over dy with the kernel flipped) or AMX, the
// weight gradient on AMX.
bool native_data(const Graph& g, const Node& n) {
  return cpu::has_bf16_dot() && all_of_dtype(g, n.in, DType::BF16) && all_of_dtype(g, n.out, DType::BF16) &&
         cpu::conv2d_backward_data_bf16_direct(shape_of(n, 1));
}
bool native_weight(const Graph& g, const Node& n) {
  return all_of_dtype(g, n.in, DType::BF16) && all_of_dtype(g, n.out, DType::F32) &&
         cpu::conv2d_backward_weight_amx_applies(shape_of(n, 1));
}
std::size_t data_bf16_workspace(const Graph&, const Node& n, int batch) {
  return cpu::conv2d_backward_data_bf16_workspace(shape_of(n, batch)) * sizeof(bf16);
}
std::size_t weight_bf16_workspace(const Graph&, const Node& n, int batch) {
  return cpu::conv2d_backward_weight_amx_workspace(shape_of(n, batch)) * sizeof(bf16);
}

void data_bf16(const StepArgs& a) {
  cpu::conv2d_backward_data_bf16(a.out<bf16>(), a.in<bf16>(0), a.in<bf16>(1), shape(a), static_cast<bf16*>(a.workspace),
                                 a.accumulate);
}
void weight_bf16(const StepArgs& a) {
  cpu::conv2d_backward_weight_amx(a.out<float>(0), a.node->out.size() == 2 ? a.out<float>(1) : nullptr,
                                  a.in<bf16>(0), a.in<bf16>(1), shape(a), static_cast<bf16*>(a.workspace),
                                  a.accumulate);
}

template <class T>
void bwd_data_cpu(const StepArgs& a) {
  if (winograd(a.state))
    return cpu::winograd_backward_data<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), shape(a), static_cast<T*>(a.workspace),
                                          a.accumulate);
  cpu::conv2d_backward_data<T>(a.out<T>(), a.in<T>(0), a.in<T>(1), shape(a), static_cast<T*>(a.workspace),
                               a.accumulate);
}

template <class T>
void bwd_weight_cpu(const StepArgs& a) {
  cpu::conv2d_backward_weight<T>(a.out<T>(0), a.node->out.size() == 2 ? a.out<T>(1) : nullptr, a.in<T>(0), a.in<T>(1),
                                 shape(a), static_cast<T*>(a.workspace), a.accumulate);
}

// Window positions along one axis that read the image rather than its padding.
long long taps_in_image(int out, int k, int stride, int pad, int in) {
  long long taps = 0;
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < k; ++i) taps += o * stride - pad + i >= 0 && o * stride - pad + i < in;
  return taps;
}

// Direct-convolution FLOPs, the same for all three passes, whatever algorithm runs. Taps on padding
// are no work (the CPU paths skip them): a 3x3 window over a 1x1 map is one multiply-add per channel
// pair, not nine, or small maps would report more than the FMA peak.
double flops(const Graph&, const Node& n, int batch) {
  const cpu::Conv2dShape s = ops::at_batch<cpu::Conv2dShape>(n, batch);
  return 2.0 * s.n * s.c_out * (s.c_in / s.groups) * taps_in_image(s.h_out, s.kh, s.stride_h, s.pad_h, s.h) *
         taps_in_image(s.w_out, s.kw, s.stride_w, s.pad_w, s.w);
}

}  // namespace

const OpDef kConv2d = OpDef("conv2d", infer_fwd).with_backward(backward).with_recompute(ops::recompute_clone)
                          .with_flops(flops).with_layouts(Layouts::Nhwc);
const OpDef kConv2dBwdData = OpDef("conv2d_backward_data", infer_bwd_data).with_flops(flops)
                             .with_layouts(Layouts::Nhwc);
const OpDef kConv2dBwdWeight = OpDef("conv2d_backward_weight", infer_bwd_weight)
                               .with_outputs({OutDType::Float, OutDType::Float}).with_required_outputs(1).with_flops(flops)
                               .with_layouts(Layouts::Nhwc).with_lean_variant(true);

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CPU_ROWS(t, kConv2d, fwd_cpu,
                 .with_prepare(choose<ConvAlgoPass::Forward>)
                 .with_workspace(chosen_workspace<cpu::conv2d_forward_workspace, cpu::winograd_forward_workspace>));
  CRUMB_CPU_ROWS(t, kConv2dBwdData, bwd_data_cpu,
                 .with_prepare(choose<ConvAlgoPass::Data>)
                 .with_workspace(
                     chosen_workspace<cpu::conv2d_backward_data_workspace, cpu::winograd_backward_data_workspace>));
  CRUMB_CPU_ROWS(t, kConv2dBwdWeight, bwd_weight_cpu,
                 .with_workspace(workspace<cpu::conv2d_backward_weight_workspace>));
  // bf16's forward and stride-1 data gradient run on vdpbf16ps (or AMX) where the CPU has it, its
  // stride-1 weight gradient on AMX; else (and fp16's) widened.
  t.add(kConv2dBwdData, Device::CPU, DType::BF16, native_or_fallback<native_data, data_bf16, data_bf16_workspace>());
  t.add(kConv2dBwdWeight, Device::CPU, DType::BF16,
        native_or_fallback<native_weight, weight_bf16, weight_bf16_workspace>());
  t.add(kConv2dBwdData, Device::CPU, DType::F16, widened_in_slices());
  t.add(kConv2dBwdWeight, Device::CPU, DType::F16, widened_in_slices());
  t.add(kConv2d, Device::CPU, DType::BF16,
        cpu::has_bf16_dot() ? OpImpl(fwd_cpu_bf16).with_workspace(bf16_workspace) : widened_in_slices());
  t.add(kConv2d, Device::CPU, DType::F16, widened_in_slices());
  add_fusion_rule({"conv2d+relu", 2, [](Graph& g) {
                     return fuse_relu_epilogue(g, kConv2d, [](Node& n) { std::any_cast<WindowAttrs&>(n.attrs).relu = true; });
                   }});
}

namespace nn {

ValueId conv2d(Graph& g, ValueId x, int out_channels, int kernel, const std::string& name, const ConvOptions& options) {
  const int groups = options.groups;
  const Value& xv = g.value(x);
  CRUMB_CHECK(xv.dims.size() == 3, "layer '", name, "' (conv2d): input '", xv.name,
              "' must be [batch, channels, height, width], got per-sample ", dims_str(xv.dims));
  CRUMB_CHECK(out_channels > 0 && kernel > 0, "layer '", name, "' (conv2d): channels and kernel must be > 0");
  CRUMB_CHECK(groups >= 1 && xv.dims[0] % groups == 0 && out_channels % groups == 0, "layer '", name,
              "' (conv2d): groups ", groups, " must divide both the input's ", xv.dims[0], " channels and the ",
              out_channels, " output channels");
  // PyTorch's fan-in of a grouped convolution: the inputs one output sees.
  const int64_t c_group = xv.dims[0] / groups, fan_in = c_group * kernel * kernel;
  std::vector<ValueId> ins{x, g.param(name + ".weight", {out_channels, c_group, kernel, kernel}, {fan_in})};
  if (options.bias) ins.push_back(g.param(name + ".bias", {out_channels}, {fan_in}));
  WindowAttrs a = WindowAttrs::square(kernel, options.stride, options.pad);
  a.groups = groups;
  return g.apply(kConv2d, ins, name, a);
}

}  // namespace nn

}  // namespace crumb

#if CRUMB_HAVE_CUDA
// conv2d's CUDA rows: cuDNN (kernels/cuda/cudnn_conv.h). Each node prepares one plan for its own pass at
// the largest micro-batch; its workspace is that pass's, planned into the arena; a smaller micro-batch
// re-targets the plan. In 16-bit graphs the forward and backward-data passes run cuDNN in bf16 or fp16 on
// tensor cores. The backward-filter pass has no 16-bit row: cuDNN's legacy API writes dw in the operands'
// type, and the parameter gradient must be float32, accumulated in float32 over micro-batches. Its
// float32 row runs on widened copies of x and dy (engine/device/widen.h) instead, with TF32 allowed:
// TF32 holds every bf16 and fp16 operand exactly, so a direct product on tensor cores rounds no more
// than in float32 (transforming algorithms, Winograd and FFT, may round their transformed operands).
namespace crumb::cuda_rows {

#if CRUMB_HAVE_CUDNN
namespace {

struct ConvState : OpState {
  ConvState(cudnnHandle_t dnn, const cpu::Conv2dShape& s, cuda::ConvPass pass, bool tf32, cudnnDataType_t dtype,
            Layout layout, Layout filter_layout, bool deterministic)
      : plan(dnn, s, pass, cuda::CudaBackend::kConvWorkspaceLimit, tf32, dtype, layout, filter_layout,
             deterministic) {}
  cuda::ConvPlan plan;
};

// An NHWC node's filter (forward, backward-data) is the [K, R, S, C] conversion the plan made of it
// (engine/plan/layout.h); its filter gradient (backward-filter) is the parameter's own NCHW gradient,
// which cuDNN writes from NHWC x and dy. A filter whose two layouts are the same bytes (1x1, or one input
// channel) is described in the activations' layout.
Layout filter_layout(const Graph& g, const Node& n, cuda::ConvPass pass) {
  const Value& w = g.value(pass == cuda::ConvPass::BackwardFilter ? n.out[0] : n.in[1]);
  return layout_free(w) ? n.layout : w.layout;
}

cudnnDataType_t data_type(DType t) {
  return t == DType::BF16 ? CUDNN_DATA_BFLOAT16 : t == DType::F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

// The plan's storage type is the graph's float dtype where a 16-bit row runs, float where the float32 row
// runs (in a 16-bit graph: on widened copies, whose values TF32 holds exactly).
template <cuda::ConvPass Pass, bool Native>
std::unique_ptr<OpState> prepare(const Graph& g, const Node& n, int max_batch, Backend& b) {
  const bool widened = !Native && is_half(g.float_dtype());
  return std::make_unique<ConvState>(cuda::CudaBackend::of(b).dnn(), ops::at_batch<cpu::Conv2dShape>(n, max_batch),
                                     Pass, g.tf32() || widened, Native ? data_type(g.float_dtype()) : CUDNN_DATA_FLOAT,
                                     n.layout, filter_layout(g, n, Pass), g.deterministic());
}

std::size_t workspace(const Graph&, const Node&, int, const OpState* state) {
  return static_cast<const ConvState*>(state)->plan.workspace_bytes();
}

cudnnHandle_t dnn(const StepArgs& a) { return cuda::CudaBackend::of(a).dnn(); }

cuda::ConvPlan& plan(const StepArgs& a) {
  cuda::ConvPlan& p = static_cast<ConvState*>(a.state)->plan;
  if (p.shape().n != a.n) p.set_batch(dnn(a), a.n);
  return p;
}

// The plan knows the storage type; the rows pass the values as they are. A fused ReLU epilogue runs as a
// pass of its own over the output (cuDNN's fused convolution-bias-activation would store it clamped).
// Native: the row runs in the graph's float dtype (else in float32, as prepare's storage type says).
template <bool Native>
void fwd(const StepArgs& a) {
  cuda::conv_forward(dnn(a), plan(a), a.out<void>(), a.in<void>(0), a.in<void>(1),
                     a.node->in.size() == 3 ? a.in<void>(2) : nullptr, a.workspace, a.workspace_bytes);
  if (!relu_epilogue(*a.node)) return;
  const std::size_t count = ops::out_count(a);
  const cudaStream_t stream = cuda::CudaBackend::of(a).compute();
  switch (Native ? a.graph->float_dtype() : DType::F32) {
    case DType::BF16: return cuda::relu_forward(a.out<bf16>(), a.out<bf16>(), count, stream);
    case DType::F16: return cuda::relu_forward(a.out<f16>(), a.out<f16>(), count, stream);
    default: return cuda::relu_forward(a.out<float>(), a.out<float>(), count, stream);
  }
}
void bwd_data(const StepArgs& a) {
  cuda::conv_backward_data(dnn(a), plan(a), a.out<void>(), a.in<void>(0), a.in<void>(1), a.workspace,
                           a.workspace_bytes, a.accumulate);
}
void bwd_weight(const StepArgs& a) {
  cuda::conv_backward_filter(dnn(a), plan(a), a.out<float>(0), a.node->out.size() == 2 ? a.out<float>(1) : nullptr,
                             a.in<float>(0), a.in<float>(1), a.workspace, a.workspace_bytes, a.accumulate);
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  using cuda::ConvPass;
  t.add(kConv2d, Device::CUDA, DType::F32,
        OpImpl(fwd<false>).with_prepare(prepare<ConvPass::Forward, false>).with_workspace(workspace).with_nhwc(true));
  t.add(kConv2dBwdData, Device::CUDA, DType::F32,
        OpImpl(bwd_data).with_prepare(prepare<ConvPass::BackwardData, false>).with_workspace(workspace)
            .with_nhwc(true));
  t.add(kConv2dBwdWeight, Device::CUDA, DType::F32,
        OpImpl(bwd_weight).with_prepare(prepare<ConvPass::BackwardFilter, false>).with_workspace(workspace)
            .with_nhwc(true));
  for (DType dt : {DType::BF16, DType::F16}) {
    t.add(kConv2d, Device::CUDA, dt,
          OpImpl(fwd<true>).with_prepare(prepare<ConvPass::Forward, true>).with_workspace(workspace).with_nhwc(true));
    t.add(kConv2dBwdData, Device::CUDA, dt,
          OpImpl(bwd_data).with_prepare(prepare<ConvPass::BackwardData, true>).with_workspace(workspace)
              .with_nhwc(true));
  }
}
#else
// Without cuDNN the build has no CUDA convolution: no rows, and compiling a conv for CUDA says so.
#endif

}  // namespace crumb::cuda_rows
#endif  // CRUMB_HAVE_CUDA
