#include "engine/cuda/ops.h"

#include <memory>

#include "engine/cuda/context.h"
#include "engine/error.h"
#include "kernels/cuda/blas.h"
#include "kernels/cuda/kernels.h"
#if CRUMB_HAVE_CUDNN
#include "kernels/cuda/cudnn_conv.h"
#endif

namespace crumb::cuda {
namespace {

cudaStream_t stream() { return Context::get().compute(); }
std::size_t count(const StepArgs& a) { return static_cast<std::size_t>(a.out_value().count(a.n)); }

// ---- elementwise
void relu_fwd(const StepArgs& a) { relu_forward(a.out<float>(), a.in<float>(0), count(a), stream()); }
void relu_bwd(const StepArgs& a) {
  relu_backward(a.out<float>(), a.in<float>(0), a.in<float>(1), count(a), a.accumulate, stream());
}
void add(const StepArgs& a) { add_forward(a.out<float>(), a.in<float>(0), a.in<float>(1), count(a), stream()); }

// ---- linear (cuBLAS); w is [out, in]
void linear_fwd(const StepArgs& a) {
  const Dims& w = a.in_value(1).dims;
  linear_forward(Context::get().blas(), a.out<float>(), a.in<float>(0), a.in<float>(1),
                 a.node->in.size() == 3 ? a.in<float>(2) : nullptr, a.n, (int)w[1], (int)w[0], a.graph->tf32());
}
void linear_bwd_data(const StepArgs& a) {
  const Dims& w = a.in_value(1).dims;
  linear_backward_data(Context::get().blas(), a.out<float>(), a.in<float>(0), a.in<float>(1), a.n, (int)w[1],
                       (int)w[0], a.accumulate, a.graph->tf32());
}
void linear_bwd_weight(const StepArgs& a) {
  const Dims& dw = a.out_value(0).dims;
  linear_backward_weight(Context::get().blas(), a.out<float>(0), a.node->out.size() == 2 ? a.out<float>(1) : nullptr,
                         a.in<float>(0), a.in<float>(1), a.n, (int)dw[1], (int)dw[0], a.accumulate,
                         a.graph->tf32());
}

// ---- pooling (custom kernels: kernels/cuda/pool.cu)
void max_pool_fwd(const StepArgs& a) {
  max_pool2d_forward(a.out<float>(0), a.out<uint8_t>(1), a.in<float>(0), ops::pool2d_shape(*a.graph, *a.node, a.n),
                     stream());
}
void max_pool_bwd(const StepArgs& a) {
  max_pool2d_backward(a.out<float>(), a.in<float>(0), a.in<uint8_t>(1), ops::pool2d_shape(*a.graph, *a.node, a.n),
                      a.accumulate, stream());
}
void avg_pool_fwd(const StepArgs& a) {
  avg_pool2d_forward(a.out<float>(), a.in<float>(0), ops::pool2d_shape(*a.graph, *a.node, a.n), stream());
}
void avg_pool_bwd(const StepArgs& a) {
  avg_pool2d_backward(a.out<float>(), a.in<float>(0), ops::pool2d_shape(*a.graph, *a.node, a.n), a.accumulate,
                      stream());
}
void gap_fwd(const StepArgs& a) {
  const auto [c, hw] = ops::global_pool_dims(*a.graph, *a.node);
  global_avg_pool_forward(a.out<float>(), a.in<float>(0), a.n, c, hw, stream());
}
void gap_bwd(const StepArgs& a) {
  const auto [c, hw] = ops::global_pool_dims(*a.graph, *a.node);
  global_avg_pool_backward(a.out<float>(), a.in<float>(0), a.n, c, hw, a.accumulate, stream());
}

// ---- softmax cross-entropy: results accumulate in the executor's device counters
void xent_fwd(const StepArgs& a) {
  static_assert(sizeof(unsigned long long) == sizeof(int64_t));
  softmax_xent_forward(a.out<float>(), a.in<float>(0), a.in<int32_t>(1), a.n, (int)a.in_value(0).dims[0], a.loss_sum,
                       reinterpret_cast<unsigned long long*>(a.correct), stream());
}
void xent_bwd(const StepArgs& a) {
  softmax_xent_backward(a.out<float>(), a.in<float>(0), a.in<int32_t>(1), a.n, (int)a.in_value(0).dims[0],
                        static_cast<float>(a.loss_scale), a.accumulate, stream());
}

#if CRUMB_HAVE_CUDNN
// ---- conv2d (cuDNN): one plan per node (a node runs one pass), built for the largest micro-batch and
// re-targeted to a ragged one.
struct ConvState : OpState {
  ConvState(const cpu::Conv2dShape& s, ConvPass pass, bool tf32)
      : plan(Context::get().dnn(), s, pass, Context::kConvWorkspaceLimit, tf32) {}
  ConvPlan plan;
};

ConvPlan& conv_plan(const StepArgs& a) {
  ConvPlan& plan = static_cast<ConvState*>(a.state)->plan;
  if (plan.shape().n != a.n) plan.set_batch(Context::get().dnn(), a.n);
  return plan;
}
void conv_fwd(const StepArgs& a) {
  conv_forward(Context::get().dnn(), conv_plan(a), a.out<float>(), a.in<float>(0), a.in<float>(1),
               a.node->in.size() == 3 ? a.in<float>(2) : nullptr, a.workspace, a.workspace_bytes);
}
void conv_bwd_data(const StepArgs& a) {
  conv_backward_data(Context::get().dnn(), conv_plan(a), a.out<float>(), a.in<float>(0), a.in<float>(1), a.workspace,
                     a.workspace_bytes, a.accumulate);
}
void conv_bwd_weight(const StepArgs& a) {
  conv_backward_filter(Context::get().dnn(), conv_plan(a), a.out<float>(0),
                       a.node->out.size() == 2 ? a.out<float>(1) : nullptr, a.in<float>(0), a.in<float>(1),
                       a.workspace, a.workspace_bytes, a.accumulate);
}
#endif

struct Impl {
  const OpDef* def;
  StepFn fn;
  bool conv;  // needs a cuDNN plan
};

const Impl kImpls[] = {
    {&kLinear, linear_fwd, false},
    {&kLinearBwdData, linear_bwd_data, false},
    {&kLinearBwdWeight, linear_bwd_weight, false},
#if CRUMB_HAVE_CUDNN
    {&kConv2d, conv_fwd, true},
    {&kConv2dBwdData, conv_bwd_data, true},
    {&kConv2dBwdWeight, conv_bwd_weight, true},
#endif
    {&kMaxPool2d, max_pool_fwd, false},
    {&kMaxPool2dBwd, max_pool_bwd, false},
    {&kAvgPool2d, avg_pool_fwd, false},
    {&kAvgPool2dBwd, avg_pool_bwd, false},
    {&kGlobalAvgPool, gap_fwd, false},
    {&kGlobalAvgPoolBwd, gap_bwd, false},
    {&kRelu, relu_fwd, false},
    {&kReluBwd, relu_bwd, false},
    {&kAdd, add, false},
    {&kSoftmaxXent, xent_fwd, false},
    {&kSoftmaxXentBwd, xent_bwd, false},
};

}  // namespace

CompiledStep compile_step(const Graph& g, const Node& n, int max_batch) {
  CRUMB_CHECK(g.float_dtype() == DType::F32, "layer '", n.name, "' (", n.def->name,
              "): the CUDA backend runs float32 graphs only, this one is ", dtype_name(g.float_dtype()));
  CompiledStep c;
  if (n.def->view) return c;
  for (const Impl& impl : kImpls) {
    if (impl.def != n.def) continue;
    c.fn = impl.fn;
#if CRUMB_HAVE_CUDNN
    if (impl.conv) {
      // ConvPlan's errors (no algorithm fits, bad shape, a cuDNN failure) name the shape; add the layer.
      try {
        const ConvPass pass = n.def == &kConv2d           ? ConvPass::Forward
                              : n.def == &kConv2dBwdData ? ConvPass::BackwardData
                                                         : ConvPass::BackwardFilter;
        auto state = std::make_unique<ConvState>(ops::conv2d_shape(g, n, max_batch), pass, g.tf32());
        c.workspace = state->plan.workspace_bytes();
        c.state = std::move(state);
      } catch (const Error& e) {
        CRUMB_FAIL("layer '", n.name, "' (", n.def->name, "): ", e.what());
      }
    }
#endif
    return c;
  }
  CRUMB_FAIL("layer '", n.name, "' (", n.def->name, ") has no CUDA implementation",
             CRUMB_HAVE_CUDNN ? "" : " (this build found no cuDNN)");
}

}  // namespace crumb::cuda
