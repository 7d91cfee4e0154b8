// Normalisation on NCHW: BatchNorm over groups of samples and GroupNorm over groups of channels, each with
// a per-channel affine (weight, bias). The declarations, their CPU rows and graph
// builders; the CUDA rows are at the end, in CUDA builds.
//
// BatchNorm's nodes: in = (x, weight, bias, running_mean, running_var, num_batches_tracked); out = (y,
// stats, moments). stats holds each group's mean and invstd for the backward (batched: a micro-batch of
// n samples has at most n groups, so n rows of [2, c] always suffice). Its stats, as GroupNorm's, are in
// the master dtype: float32 in a 16-bit graph, where a rounded mean or invstd would put u * |mean| / std
// of error into every normalised value the backward recomputes. moments is a per-batch total
// (a Metric, zeroed by the batch's first micro-batch): the Chan merge of every group's count, mean and
// M2, committed to the running statistics by the batch's last micro-batch (BnStats::Deferred). Groups
// never straddle micro-batches (the scheduler's micro-batch is a multiple of the group), so a batch's
// gradients and running statistics are the same for every micro-batch size.
#include "engine/ops/norm.h"

#include <numeric>

#include "engine/ops/norm_rows.h"

#include "engine/graph/autograd.h"
#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "kernels/norm.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace crumb {
namespace {

// The per-channel parameters and state must be [c]; num_batches_tracked a scalar I64.
void check_channel_inputs(const Graph& g, const Node& n, int c, std::size_t count) {
  for (std::size_t i = 1; i < count; ++i) {
    const Value& v = g.value(n.in[i]);
    if (i == 5) {
      if (v.dtype != DType::I64 || !v.dims.empty()) ops::fail(n, "num_batches_tracked must be an I64 scalar");
    } else if (v.dims != Dims{c} || v.batched) {
      ops::fail(n, "'" + v.name + "' must be [" + std::to_string(c) + "], got " + dims_str(v.dims));
    }
  }
}

// x must be [batch, c, h, w]; returns {c, h * w}.
std::pair<int, int> check_image(const Node& n, const Value& x) {
  if (!x.batched || x.dims.size() != 3)
    ops::fail(n, "input '" + x.name + "' must be [batch, channels, height, width], got per-sample " + dims_str(x.dims));
  return {static_cast<int>(x.dims[0]), static_cast<int>(x.dims[1] * x.dims[2])};
}

// ---- BatchNorm
void infer_bn(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(6), ops::outputs(3));
  const BatchNormAttrs& a = ops::attrs<BatchNormAttrs>(n);
  const auto [c, hw] = check_image(n, g.value(n.in[0]));
  check_channel_inputs(g, n, c, 6);
  if (a.group < 0) ops::fail(n, "group must be >= 1 samples, or 0 for the whole micro-batch");
  if (!(a.eps > 0) || !(a.momentum >= 0 && a.momentum <= 1)) ops::fail(n, "eps must be > 0 and momentum in [0, 1]");
  n.geometry = cpu::BatchNormShape{1, c, hw, a.group};
  ops::set_out_dims(g, n, 0, g.value(n.in[0]).dims);
  ops::set_out_dims(g, n, 1, {2, c});
  ops::set_out_dims(g, n, 2, {3, c});
}

// in: dy, x, weight, stats  out: dweight, dbias[, dx]
void infer_bn_bwd(Graph& g, Node& n) {
  if (n.in.size() != 4 || n.out.size() < 2 || n.out.size() > 3) ops::fail(n, "expects (dy, x, w, stats) -> (dw, db[, dx])");
  const cpu::BatchNormShape& s = ops::geometry<cpu::BatchNormShape>(n);
  if (dims_count(g.value(n.in[0]).dims) != int64_t{s.c} * s.hw || g.value(n.in[0]).dims != g.value(n.in[1]).dims ||
      g.value(n.in[2]).dims != Dims{s.c} || g.value(n.in[3]).dims != Dims{2, s.c})
    ops::fail(n, "gradient, input or statistics do not match the layer");
  ops::set_out_dims(g, n, 0, {s.c});
  ops::set_out_dims(g, n, 1, {s.c});
  if (n.out.size() == 3) ops::set_out_dims(g, n, 2, g.value(n.in[1]).dims);
}

// The normalised layers' backward: one node computes (dw, db) in the parameters' write mode and dx
// (always written) from the same per-group sums.
void norm_backward(GradBuilder& gb, const Node& n, const OpDef& bwd) {
  const ValueId x = n.in[0], w = n.in[1], b = n.in[2];
  const GradWrite write = gb.claim_param_grad(w);
  if (gb.claim_param_grad(b) != write) ops::fail(n, "weight and bias must be written by the same layers");
  std::vector<ValueId> outs{gb.param_grad(w), gb.param_grad(b)};
  ValueId dx = -1;
  if (gb.needs_grad(x)) {
    dx = gb.new_grad_value(x, "grad(" + gb.graph().value(x).name + ")");
    outs.push_back(dx);
  }
  gb.emit(bwd, {gb.grad(n.out[0]), x, w, n.out[1]}, outs, n.name + ".backward", n.attrs, n.geometry, write);
  if (dx >= 0) gb.add_grad(x, dx);
}

void bn_backward(GradBuilder& gb, const Node& n) { norm_backward(gb, n, kBatchNormBwd); }

// Recomputed in the backward pass from the statistics the forward stored (which the layer's backward
// reads anyway), never from the batch again: the running statistics must see each batch once.
std::vector<ValueId> bn_recompute(Graph& g, const Node& n, const std::vector<ValueId>& in) {
  return ops::add_recompute(g, n, kBatchNormApply, {in[0], in[1], in[2], n.out[1]}, 1);
}

// in: x, weight, bias, stats  out: y
void infer_bn_apply(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(4), ops::outputs(1));
  const cpu::BatchNormShape& s = ops::geometry<cpu::BatchNormShape>(n);
  if (dims_count(g.value(n.in[0]).dims) != int64_t{s.c} * s.hw || g.value(n.in[1]).dims != Dims{s.c} ||
      g.value(n.in[2]).dims != Dims{s.c} || g.value(n.in[3]).dims != Dims{2, s.c})
    ops::fail(n, "input, parameters or statistics do not match the layer");
  ops::set_out_dims(g, n, 0, g.value(n.in[0]).dims);
}

// Activations are T; parameters, statistics and their gradients Arith<T> (float32 in a 16-bit graph).
template <class T> void bn_apply_cpu(const StepArgs& a) {
  using A = Arith<T>;
  cpu::batch_norm_apply<T>(a.out<T>(0), a.in<T>(0), a.in<A>(1), a.in<A>(2), a.in<A>(3), ops::batch_norm_shape(a));
}

template <class T> void bn_fwd_cpu(const StepArgs& a) { ops::batch_norm_forward_cpu<T>(a, {}); }

template <class T> void bn_bwd_cpu(const StepArgs& a) {
  const BatchNormAttrs& at = ops::attrs<BatchNormAttrs>(*a.node);
  using A = Arith<T>;
  cpu::batch_norm_backward<T>(a.out<A>(0), a.out<A>(1), a.node->out.size() == 3 ? a.out<T>(2) : nullptr, a.in<T>(0),
                              a.in<T>(1), a.in<A>(2), a.in<A>(3), ops::batch_norm_shape(a), !at.frozen, a.accumulate);
}

// ---- GroupNorm: in = (x, weight, bias); out = (y, stats [groups][2] per sample).
void infer_gn(Graph& g, Node& n) {
  ops::expect_arity(n, ops::inputs(3), ops::outputs(2));
  const GroupNormAttrs& a = ops::attrs<GroupNormAttrs>(n);
  const auto [c, hw] = check_image(n, g.value(n.in[0]));
  check_channel_inputs(g, n, c, 3);
  if (a.groups < 1 || c % a.groups != 0)
    ops::fail(n, std::to_string(a.groups) + " groups do not divide " + std::to_string(c) + " channels");
  if (!(a.eps > 0)) ops::fail(n, "eps must be > 0");
  n.geometry = cpu::GroupNormShape{1, c, hw, a.groups};
  ops::set_out_dims(g, n, 0, g.value(n.in[0]).dims);
  ops::set_out_dims(g, n, 1, {2, a.groups});
}

void infer_gn_bwd(Graph& g, Node& n) {
  if (n.in.size() != 4 || n.out.size() < 2 || n.out.size() > 3) ops::fail(n, "expects (dy, x, w, stats) -> (dw, db[, dx])");
  const cpu::GroupNormShape& s = ops::geometry<cpu::GroupNormShape>(n);
  if (dims_count(g.value(n.in[0]).dims) != int64_t{s.c} * s.hw || g.value(n.in[0]).dims != g.value(n.in[1]).dims ||
      g.value(n.in[2]).dims != Dims{s.c} || g.value(n.in[3]).dims != Dims{2, s.groups})
    ops::fail(n, "gradient, input or statistics do not match the layer");
  ops::set_out_dims(g, n, 0, {s.c});
  ops::set_out_dims(g, n, 1, {s.c});
  if (n.out.size() == 3) ops::set_out_dims(g, n, 2, g.value(n.in[1]).dims);
}

void gn_backward(GradBuilder& gb, const Node& n) { norm_backward(gb, n, kGroupNormBwd); }

cpu::GroupNormShape gn_shape(const StepArgs& a) { return ops::at_batch<cpu::GroupNormShape>(*a.node, a.n); }

template <class T> void gn_fwd_cpu(const StepArgs& a) {
  using A = Arith<T>;
  cpu::group_norm_forward<T>(a.out<T>(0), a.out<A>(1), a.in<T>(0), a.in<A>(1), a.in<A>(2), gn_shape(a),
                             ops::attrs<GroupNormAttrs>(*a.node).eps);
}

template <class T> void gn_bwd_cpu(const StepArgs& a) {
  using A = Arith<T>;
  cpu::group_norm_backward<T>(a.out<A>(0), a.out<A>(1), a.node->out.size() == 3 ? a.out<T>(2) : nullptr, a.in<T>(0),
                              a.in<T>(1), a.in<A>(2), a.in<A>(3), gn_shape(a), a.accumulate);
}

}  // namespace

// The statistics the forward keeps for the backward (mean and 1/std per channel or group) are in the
// master dtype: float32 in mixed precision, as autocast keeps normalisation in float32.
const OpDef kBatchNorm = OpDef("batch_norm", infer_bn).with_backward(bn_backward)
                         .with_outputs({OutDType::Float, OutDType::Master, OutSpec::metric(OutDType::F64)})
                         .with_recompute(bn_recompute).with_layouts(Layouts::Nhwc);
const OpDef kBatchNormApply = OpDef("batch_norm_apply", infer_bn_apply).with_inplace(true)
                              .with_layouts(Layouts::Nhwc);
const OpDef kBatchNormBwd = OpDef("batch_norm_backward", infer_bn_bwd)
                            .with_outputs({OutDType::Float, OutDType::Float, OutDType::Float})
                            .with_required_outputs(2).with_layouts(Layouts::Nhwc);
const OpDef kGroupNorm = OpDef("group_norm", infer_gn).with_backward(gn_backward)
                         .with_outputs({OutDType::Float, OutDType::Master}).with_recompute(ops::recompute_clone)
                         .with_layouts(Layouts::Nhwc);
const OpDef kGroupNormBwd = OpDef("group_norm_backward", infer_gn_bwd)
                            .with_outputs({OutDType::Float, OutDType::Float, OutDType::Float})
                            .with_required_outputs(2).with_layouts(Layouts::Nhwc);

namespace ops {
// The running statistics are inputs the layer updates in place: persistent State no other node reads in a
// training pass.
template <class T> void batch_norm_commit_cpu(const StepArgs& a) {
  const BatchNormAttrs& at = ops::attrs<BatchNormAttrs>(*a.node);
  if (at.frozen || at.stats != BnStats::Deferred) return;
  using A = Arith<T>;
  cpu::batch_norm_commit<A>(const_cast<A*>(a.in<A>(3)), const_cast<A*>(a.in<A>(4)), const_cast<int64_t*>(a.in<int64_t>(5)),
                            a.out<double>(2), static_cast<int>(a.in_value(3).dims[0]), at.momentum);
}

template <class T> void batch_norm_forward_cpu(const StepArgs& a, const NormEpilogue<T>& e) {
  const BatchNormAttrs& at = ops::attrs<BatchNormAttrs>(*a.node);
  const cpu::BatchNormShape s = ops::batch_norm_shape(a);
  // The running statistics are inputs the layer updates in place: persistent State no other node reads
  // in a training pass.
  using A = Arith<T>;
  A* running_mean = const_cast<A*>(a.in<A>(3));
  A* running_var = const_cast<A*>(a.in<A>(4));
  int64_t* tracked = const_cast<int64_t*>(a.in<int64_t>(5));
  if (!a.training || at.frozen) {
    cpu::batch_norm_forward_frozen<T>(a.out<T>(0), a.training ? a.out<A>(1) : nullptr, a.in<T>(0), a.in<A>(1),
                                      a.in<A>(2), running_mean, running_var, s, at.eps, e);
    return;
  }
  const bool deferred = at.stats == BnStats::Deferred;
  double* moments = a.out<double>(2);
  cpu::batch_norm_forward_train<T>(a.out<T>(0), a.out<A>(1), a.in<T>(0), a.in<A>(1), a.in<A>(2), s, at.eps,
                                   deferred ? moments : nullptr, deferred ? nullptr : running_mean,
                                   deferred ? nullptr : running_var, tracked, at.momentum, e);
  if (deferred && a.last && a.commit) batch_norm_commit_cpu<T>(a);
}

#define CRUMB_INSTANTIATE(T)                                                          \
  template void batch_norm_forward_cpu<T>(const StepArgs&, const NormEpilogue<T>&); \
  template void batch_norm_commit_cpu<T>(const StepArgs&);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
CRUMB_INSTANTIATE(bf16)
CRUMB_INSTANTIATE(f16)
#undef CRUMB_INSTANTIATE

cpu::BatchNormShape batch_norm_shape(const StepArgs& a) {
  cpu::BatchNormShape s = at_batch<cpu::BatchNormShape>(*a.node, a.n);
  if (s.group == 0) s.group = a.n;  // the whole micro-batch is one group
  return s;
}
}  // namespace ops

const BatchNormAttrs* batch_norm_attrs(const Node& n) {
  const bool bn = n.def == &kBatchNorm || n.def == &kBatchNormRelu || n.def == &kBatchNormAddRelu;
  return bn ? &ops::attrs<BatchNormAttrs>(n) : nullptr;
}

int micro_batch_multiple(const Graph& g) {
  int multiple = 1;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const BatchNormAttrs* bn = batch_norm_attrs(g.node(i));
    if (!bn) continue;
    const BatchNormAttrs& a = *bn;
    if (a.frozen) continue;  // normalises each sample with the running statistics
    if (a.group == 0) return 0;
    multiple = std::lcm(multiple, a.group);
  }
  return multiple;
}

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  t.add(kBatchNorm, Device::CPU, DType::F32, OpImpl(bn_fwd_cpu<float>).with_commit(ops::batch_norm_commit_cpu<float>));
  t.add(kBatchNorm, Device::CPU, DType::F64, OpImpl(bn_fwd_cpu<double>).with_commit(ops::batch_norm_commit_cpu<double>));
  t.add(kBatchNorm, Device::CPU, DType::BF16, OpImpl(bn_fwd_cpu<bf16>).with_commit(ops::batch_norm_commit_cpu<bf16>));
  t.add(kBatchNorm, Device::CPU, DType::F16, OpImpl(bn_fwd_cpu<f16>).with_commit(ops::batch_norm_commit_cpu<f16>));
  CRUMB_CPU_ROWS16(t, kBatchNormBwd, bn_bwd_cpu);
  CRUMB_CPU_ROWS16(t, kBatchNormApply, bn_apply_cpu);
  CRUMB_CPU_ROWS16(t, kGroupNorm, gn_fwd_cpu);
  CRUMB_CPU_ROWS16(t, kGroupNormBwd, gn_bwd_cpu);
}

namespace nn {

namespace {
// The channel count of an NCHW input, checked, for a normalisation layer's parameters.
int64_t channels_of(const Graph& g, ValueId x, const std::string& name, const char* op) {
  const Value& xv = g.value(x);
  CRUMB_CHECK(xv.dims.size() == 3, "layer '", name, "' (", op, "): input '", xv.name,
              "' must be [batch, channels, height, width], got per-sample ", dims_str(xv.dims));
  return xv.dims[0];
}
}  // namespace

ValueId batch_norm2d(Graph& g, ValueId x, const std::string& name, const BatchNormAttrs& attrs) {
  const int64_t c = channels_of(g, x, name, "batch_norm");
  const ValueId w = g.param(name + ".weight", {c}, ParamInit::constant(1), Graph::ParamDType::Master);
  const ValueId b = g.param(name + ".bias", {c}, ParamInit::constant(0), Graph::ParamDType::Master);
  const ValueId mean = g.state(name + ".running_mean", {c}, 0.0);
  const ValueId var = g.state(name + ".running_var", {c}, 1.0);
  const ValueId tracked = g.state(name + ".num_batches_tracked", {}, 0.0, DType::I64);
  return g.apply(kBatchNorm, {x, w, b, mean, var, tracked}, name, attrs);
}

ValueId group_norm(Graph& g, ValueId x, int groups, const std::string& name, double eps) {
  const int64_t c = channels_of(g, x, name, "group_norm");
  const ValueId w = g.param(name + ".weight", {c}, ParamInit::constant(1), Graph::ParamDType::Master);
  const ValueId b = g.param(name + ".bias", {c}, ParamInit::constant(0), Graph::ParamDType::Master);
  return g.apply(kGroupNorm, {x, w, b}, name, GroupNormAttrs{groups, eps});
}

}  // namespace nn

}  // namespace crumb

#if CRUMB_HAVE_CUDA
// BatchNorm's and GroupNorm's CUDA rows (kernels/cuda/norm.cu) on the compute stream, with the CPU rows'
// logic (above): the running statistics, num_batches_tracked and the moments stay in device
// memory and are updated there, so a step never waits for the host. T is the activations' storage type
// (float, bf16, f16); parameters, their gradients, stats and running statistics are float32 in every
// graph the device runs (the master dtype).
namespace crumb::cuda_rows {

// The running statistics and moments are float32 and double whatever T is: one commit serves every row.
void batch_norm_commit(const StepArgs& a) {
  const BatchNormAttrs& at = ops::attrs<BatchNormAttrs>(*a.node);
  if (at.frozen || at.stats != BnStats::Deferred) return;
  cuda::batch_norm_commit(const_cast<float*>(a.in<float>(3)), const_cast<float*>(a.in<float>(4)),
                          const_cast<int64_t*>(a.in<int64_t>(5)), a.out<double>(2),
                          static_cast<int>(a.in_value(3).dims[0]), at.momentum, cuda::CudaBackend::of(a).compute());
}

namespace {
// The kernels' shape of a node at `batch` samples (a group of 0 is the whole batch) in the node's layout:
// BatchNorm runs natively in channels-last plans.
cpu::BatchNormShape bn_shape_at(const Node& n, int batch) {
  cpu::BatchNormShape s = ops::at_batch<cpu::BatchNormShape>(n, batch);
  if (s.group == 0) s.group = batch;
  s.layout = n.layout;
  return s;
}
}  // namespace

cpu::BatchNormShape batch_norm_shape(const StepArgs& a) { return bn_shape_at(*a.node, a.n); }

// Scratch for the cross-block partial sums of `batch` samples, which bound those of fewer. A frozen
// layer's forward sums nothing; its backward still sums dw and db.
std::size_t batch_norm_forward_workspace(const Graph&, const Node& n, int batch, const OpState*) {
  return ops::attrs<BatchNormAttrs>(n).frozen ? 0 : cuda::batch_norm_forward_train_workspace(bn_shape_at(n, batch));
}
std::size_t batch_norm_backward_workspace(const Graph&, const Node& n, int batch, const OpState*) {
  return cuda::batch_norm_backward_workspace(bn_shape_at(n, batch));
}

// As the CPU rows': group 0 normalises the whole micro-batch as one group.
template <class T> void batch_norm_forward(const StepArgs& a, const NormEpilogue<T>& e) {
  const BatchNormAttrs& at = ops::attrs<BatchNormAttrs>(*a.node);
  const cpu::BatchNormShape s = batch_norm_shape(a);
  const cudaStream_t stream = cuda::CudaBackend::of(a).compute();
  // The running statistics are inputs the layer updates in place: persistent State no other node reads
  // in a training pass.
  float* running_mean = const_cast<float*>(a.in<float>(3));
  float* running_var = const_cast<float*>(a.in<float>(4));
  int64_t* tracked = const_cast<int64_t*>(a.in<int64_t>(5));
  if (!a.training || at.frozen) {
    cuda::batch_norm_forward_frozen(a.out<T>(0), a.training ? a.out<float>(1) : nullptr, a.in<T>(0), a.in<float>(1),
                                    a.in<float>(2), running_mean, running_var, s, at.eps, stream, e);
    return;
  }
  const bool deferred = at.stats == BnStats::Deferred;
  double* moments = a.out<double>(2);
  cuda::batch_norm_forward_train(a.out<T>(0), a.out<float>(1), a.in<T>(0), a.in<float>(1), a.in<float>(2), s, at.eps,
                                 deferred ? moments : nullptr, deferred ? nullptr : running_mean,
                                 deferred ? nullptr : running_var, tracked, at.momentum, a.workspace,
                                 a.workspace_bytes, stream, e);
  if (deferred && a.last && a.commit) batch_norm_commit(a);
}
template void batch_norm_forward<float>(const StepArgs&, const NormEpilogue<float>&);
template void batch_norm_forward<bf16>(const StepArgs&, const NormEpilogue<bf16>&);
template void batch_norm_forward<f16>(const StepArgs&, const NormEpilogue<f16>&);

namespace {

template <class T> void bn_fwd(const StepArgs& a) { batch_norm_forward<T>(a, {}); }

template <class T> void bn_bwd(const StepArgs& a) {
  const BatchNormAttrs& at = ops::attrs<BatchNormAttrs>(*a.node);
  cuda::batch_norm_backward(a.out<float>(0), a.out<float>(1), a.node->out.size() == 3 ? a.out<T>(2) : nullptr,
                            a.in<T>(0), a.in<T>(1), a.in<float>(2), a.in<float>(3), batch_norm_shape(a),
                            !at.frozen, a.accumulate, a.workspace, a.workspace_bytes,
                            cuda::CudaBackend::of(a).compute());
}

template <class T> void bn_apply(const StepArgs& a) {
  cuda::batch_norm_apply(a.out<T>(0), a.in<T>(0), a.in<float>(1), a.in<float>(2), a.in<float>(3), batch_norm_shape(a),
                         cuda::CudaBackend::of(a).compute());
}

cpu::GroupNormShape gn_shape(const StepArgs& a) { return ops::at_batch<cpu::GroupNormShape>(*a.node, a.n); }

template <class T> void gn_fwd(const StepArgs& a) {
  cuda::group_norm_forward(a.out<T>(0), a.out<float>(1), a.in<T>(0), a.in<float>(1), a.in<float>(2), gn_shape(a),
                           ops::attrs<GroupNormAttrs>(*a.node).eps, cuda::CudaBackend::of(a).compute());
}

template <class T> void gn_bwd(const StepArgs& a) {
  cuda::group_norm_backward(a.out<float>(0), a.out<float>(1), a.node->out.size() == 3 ? a.out<T>(2) : nullptr,
                            a.in<T>(0), a.in<T>(1), a.in<float>(2), a.in<float>(3), gn_shape(a), a.accumulate,
                            cuda::CudaBackend::of(a).compute());
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  CRUMB_CUDA_ROWS(t, kBatchNorm, bn_fwd,
                  .with_commit(batch_norm_commit)
                      .with_workspace(batch_norm_forward_workspace)
                      .with_nhwc(true));
  CRUMB_CUDA_ROWS(t, kBatchNormBwd, bn_bwd,
                  .with_workspace(batch_norm_backward_workspace).with_nhwc(true));
  CRUMB_CUDA_ROWS(t, kBatchNormApply, bn_apply, .with_nhwc(true));
  CRUMB_CUDA_ROWS(t, kGroupNorm, gn_fwd);
  CRUMB_CUDA_ROWS(t, kGroupNormBwd, gn_bwd);
}

}  // namespace crumb::cuda_rows
#endif  // CRUMB_HAVE_CUDA
