// Softmax cross-entropy: the loss op. Forward keeps the probabilities for the backward and adds the
// summed loss and the correct count into its metric outputs; the backward seeds the gradient with the 1/B loss scale of the whole batch. The
// declarations, their CPU rows and graph builder; the CUDA rows are at the end, in CUDA builds.
#include "engine/ops/softmax_xent.h"

#include "engine/graph/autograd.h"
#include "engine/base/registry.h"
#include "kernels/softmax_xent.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace crumb {
namespace {

void check_inputs(const Graph& g, const Node& n) {
  const Value& logits = g.value(n.in[0]);
  const Value& labels = g.value(n.in[1]);
  if (!logits.batched || logits.dims.size() != 1)
    ops::fail(n, "logits '" + logits.name + "' must be [batch, classes], got per-sample " + dims_str(logits.dims));
  if (!labels.batched || !labels.dims.empty() || labels.dtype != DType::I32)
    ops::fail(n, "labels '" + labels.name + "' must be one int32 class index per sample");
}

void infer_fwd(Graph& g, Node& n) {  // in: logits, labels  out: probs, loss sum, correct count
  ops::expect_arity(n, ops::inputs(2), ops::outputs(3));
  check_inputs(g, n);
  n.geometry = ClassesGeometry{(int)g.value(n.in[0]).dims[0]};
  ops::set_out_dims(g, n, 0, g.value(n.in[0]).dims);
  ops::set_out_dims(g, n, 1, {});
  ops::set_out_dims(g, n, 2, {});
}

void infer_bwd(Graph& g, Node& n) {  // in: probs, labels  out: dlogits
  ops::expect_arity(n, ops::inputs(2), ops::outputs(1));
  check_inputs(g, n);
  ops::set_out_dims(g, n, 0, g.value(n.in[0]).dims);
}

void backward(GradBuilder& gb, const Node& n) {
  const ValueId logits = n.in[0];
  const ValueId d = gb.new_grad_value(logits, "grad(" + gb.graph().value(logits).name + ")");
  gb.emit(kSoftmaxXentBwd, {n.out[0], n.in[1]}, {d}, n.name + ".backward", {}, n.geometry);
  gb.add_grad(logits, d);
}

int classes(const StepArgs& a) { return ops::geometry<ClassesGeometry>(*a.node).k; }

template <class T> void fwd_cpu(const StepArgs& a) {
  const int32_t* labels = a.in<int32_t>(1);
  Arith<T>* probs = a.out<Arith<T>>();
  *a.out<double>(1) += cpu::softmax_xent_forward<T>(probs, a.in<T>(0), labels, a.n, classes(a));
  *a.out<int64_t>(2) += cpu::count_correct(probs, labels, a.n, classes(a));
}

template <class T> void bwd_cpu(const StepArgs& a) {
  cpu::softmax_xent_backward<T>(a.out<T>(), a.in<Arith<T>>(0), a.in<int32_t>(1), a.n, classes(a),
                                static_cast<Arith<T>>(a.loss_scale), a.accumulate);
}

}  // namespace

// Outputs: the probabilities (kept for the backward; in the master dtype, float32 in mixed precision, as
// autocast computes softmax and the loss in float32), the unscaled loss summed over the batch's samples
// and how many of them the probabilities classify correctly (metrics: added into over micro-batches).
const OpDef kSoftmaxXent =
    OpDef("softmax_cross_entropy", infer_fwd)
        .with_backward(backward)
        .with_outputs({OutDType::Master, OutSpec::metric(OutDType::F64), OutSpec::metric(OutDType::I64)});
const OpDef kSoftmaxXentBwd = OpDef("softmax_cross_entropy_backward", infer_bwd);

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CPU_ROWS16(t, kSoftmaxXent, fwd_cpu);
  CRUMB_CPU_ROWS16(t, kSoftmaxXentBwd, bwd_cpu);
}

namespace nn {

ValueId softmax_cross_entropy(Graph& g, ValueId logits, ValueId labels, const std::string& name) {
  const ValueId probs = g.apply(kSoftmaxXent, {logits, labels}, name);
  g.set_loss(probs);
  return probs;
}

}  // namespace nn

}  // namespace crumb

#if CRUMB_HAVE_CUDA
// Softmax cross-entropy's CUDA rows (kernels/cuda/softmax_xent.cu), for float32 and 16-bit logits (the
// probabilities are float32 either way): the forward adds the loss sum and correct count into its metric
// outputs, in device memory.
namespace crumb::cuda_rows {

namespace {

int classes(const StepArgs& a) { return ops::geometry<ClassesGeometry>(*a.node).k; }

template <class T> void fwd(const StepArgs& a) {
  static_assert(sizeof(unsigned long long) == sizeof(int64_t));
  cuda::softmax_xent_forward(a.out<float>(), a.in<T>(0), a.in<int32_t>(1), a.n, classes(a), a.out<double>(1),
                             reinterpret_cast<unsigned long long*>(a.out<int64_t>(2)), cuda::CudaBackend::of(a).compute());
}
template <class T> void bwd(const StepArgs& a) {
  cuda::softmax_xent_backward(a.out<T>(), a.in<float>(0), a.in<int32_t>(1), a.n, classes(a),
                              static_cast<float>(a.loss_scale), a.accumulate, cuda::CudaBackend::of(a).compute());
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CUDA_ROWS(t, kSoftmaxXent, fwd);
  CRUMB_CUDA_ROWS(t, kSoftmaxXentBwd, bwd);
}

}  // namespace crumb::cuda_rows
#endif  // CRUMB_HAVE_CUDA
