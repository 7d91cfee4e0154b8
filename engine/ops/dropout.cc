// Dropout: in training each element is zeroed with probability p and the others are scaled by 1 / (1 - p)
// (PyTorch's inverted dropout); in evaluation it is the identity. The declaration, its CPU rows and
// its graph builder; the CUDA rows are at the end, in CUDA builds.
//
// The mask is a pure function of (batch key, layer, the sample's index in the whole batch, element)
// (kernels/dropout_mask.h), never of the micro-batch a sample falls in, so gradients stay independent of
// the micro-batch size. The backward regenerates the mask from the same key instead of saving it: hashing
// costs a few multiplies per element, while a saved mask would stay live from the forward to the backward
// in every dropout layer, which is the memory the planner exists to save.
#include "engine/ops/dropout.h"

#include <string>

#include "engine/graph/autograd.h"
#include "engine/base/registry.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace crumb {
namespace {

// Forward and backward alike: one batched input, shaped like the output.
void infer_dropout(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(1), ops::outputs(1));
  const DropoutAttrs& a = ops::attrs<DropoutAttrs>(n);
  if (!(a.p >= 0 && a.p < 1)) ops::fail(n, "p must be in [0, 1), got " + std::to_string(a.p));
  const Value& x = g.value(n.in[0]);
  if (!x.batched) ops::fail(n, "input '" + x.name + "' must have a batch dimension");
  ops::set_out_dims(g, n, 0, x.dims);
}

void dropout_backward(GradBuilder& gb, const Node& n) {
  const ValueId x = n.in[0];
  const ValueId dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
  gb.emit(kDropoutBwd, {gb.grad(n.out[0])}, {dx}, n.name + ".backward", n.attrs);
  gb.add_grad(x, dx);
}

// Both directions are the same map: dx = dy * mask * scale with the forward's mask (the backward runs in
// the same micro-batch, so it sees the same key).
template <class T> void dropout_cpu(const StepArgs& a) {
  const std::size_t count = ops::out_count(a);
  if (!a.training) {
    if (a.out<T>() != a.in<T>(0)) cpu::copy_or_accumulate<T>(a.out<T>(), a.in<T>(0), count, false);
    return;
  }
  const DropoutAttrs& at = ops::attrs<DropoutAttrs>(*a.node);
  cpu::dropout<T>(a.out<T>(), a.in<T>(0), a.n, count / a.n, *a.random, at.layer, at.threshold(),
                  static_cast<Arith<T>>(at.scale()), a.accumulate);
}

}  // namespace

const OpDef kDropout = OpDef("dropout", infer_dropout).with_backward(dropout_backward).with_inplace(true)
                       .with_random(true).with_recompute(ops::recompute_clone).with_layouts(Layouts::Nhwc);
const OpDef kDropoutBwd = OpDef("dropout_backward", infer_dropout).with_inplace(true).with_random(true)
                          .with_layouts(Layouts::Nhwc);

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CPU_ROWS16(t, kDropout, dropout_cpu);
  CRUMB_CPU_ROWS16(t, kDropoutBwd, dropout_cpu);
}

namespace nn {

ValueId dropout(Graph& g, ValueId x, double p, const std::string& name) {
  uint64_t layer = 0xcbf29ce484222325ULL;  // FNV-1a: a stable hash, unlike std::hash
  for (unsigned char ch : name) layer = (layer ^ ch) * 0x100000001b3ULL;
  return g.apply(kDropout, {x}, name, DropoutAttrs{p, layer});
}

}  // namespace nn

}  // namespace crumb

#if CRUMB_HAVE_CUDA
// Dropout's CUDA rows: the CPU's map and mask (kernels/cuda/dropout.cu), on the compute stream, for
// float32 and 16-bit graphs. The key is read from device memory, so recorded runs replay with each
// micro-batch's own key.
namespace crumb::cuda_rows {

namespace {

template <class T> void dropout(const StepArgs& a) {
  const std::size_t count = ops::out_count(a);
  cudaStream_t stream = cuda::CudaBackend::of(a).compute();
  if (!a.training) {
    if (a.out<T>() != a.in<T>(0)) cuda::copy_or_accumulate(a.out<T>(), a.in<T>(0), count, false, stream);
    return;
  }
  const DropoutAttrs& at = ops::attrs<DropoutAttrs>(*a.node);
  cuda::dropout(a.out<T>(), a.in<T>(0), a.n, count / a.n, a.random, at.layer, at.threshold(),
                static_cast<float>(at.scale()), a.accumulate, stream);
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CUDA_ROWS(t, kDropout, dropout);
  CRUMB_CUDA_ROWS(t, kDropoutBwd, dropout);
}

}  // namespace crumb::cuda_rows
#endif  // CRUMB_HAVE_CUDA
