// conv2d's CUDA rows: cuDNN (kernels/cuda/cudnn_conv.h). Each node prepares one plan for its own pass at
// the largest micro-batch; its workspace is that pass's, planned into the arena; a smaller micro-batch
// re-targets the plan.
#include "engine/cuda/cuda_backend.h"
#include "engine/base/registry.h"
#include "engine/ops/conv2d.h"

#if CRUMB_HAVE_CUDNN
#include "kernels/cuda/cudnn_conv.h"
#endif

namespace crumb {

#if CRUMB_HAVE_CUDNN
namespace {

struct ConvState : OpState {
  ConvState(cudnnHandle_t dnn, const cpu::Conv2dShape& s, cuda::ConvPass pass, bool tf32)
      : plan(dnn, s, pass, cuda::CudaBackend::kConvWorkspaceLimit, tf32) {}
  cuda::ConvPlan plan;
};

template <cuda::ConvPass Pass>
std::unique_ptr<OpState> prepare(const Graph& g, const Node& n, int max_batch, Backend& b) {
  return std::make_unique<ConvState>(cuda::CudaBackend::of(b).dnn(), ops::at_batch<cpu::Conv2dShape>(n, max_batch),
                                     Pass, g.tf32());
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

void fwd(const StepArgs& a) {
  cuda::conv_forward(dnn(a), plan(a), a.out<float>(), a.in<float>(0), a.in<float>(1),
                     a.node->in.size() == 3 ? a.in<float>(2) : nullptr, a.workspace, a.workspace_bytes);
}
void bwd_data(const StepArgs& a) {
  cuda::conv_backward_data(dnn(a), plan(a), a.out<float>(), a.in<float>(0), a.in<float>(1), a.workspace,
                           a.workspace_bytes, a.accumulate);
}
void bwd_weight(const StepArgs& a) {
  cuda::conv_backward_filter(dnn(a), plan(a), a.out<float>(0), a.node->out.size() == 2 ? a.out<float>(1) : nullptr,
                             a.in<float>(0), a.in<float>(1), a.workspace, a.workspace_bytes, a.accumulate);
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  t.add(kConv2d, Device::CUDA, DType::F32,
        OpImpl(fwd).with_prepare(prepare<cuda::ConvPass::Forward>).with_workspace(workspace));
  t.add(kConv2dBwdData, Device::CUDA, DType::F32,
        OpImpl(bwd_data).with_prepare(prepare<cuda::ConvPass::BackwardData>).with_workspace(workspace));
  t.add(kConv2dBwdWeight, Device::CUDA, DType::F32,
        OpImpl(bwd_weight).with_prepare(prepare<cuda::ConvPass::BackwardFilter>).with_workspace(workspace));
}
#else
// Without cuDNN the build has no CUDA convolution: no rows, and compiling a conv for CUDA says so.
#endif

}  // namespace crumb
