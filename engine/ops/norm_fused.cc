// Fused normalisation: BatchNorm or GroupNorm, then an optional residual add, then ReLU, as one op
// forward and one backward, and the fusion rules that put them in place of those chains (engine/graph/
// fusion.h). The declarations (engine/ops/norm.h), their CPU rows and the rules; the CUDA rows are at the
// end, in CUDA builds.
//
// The forward writes y once, where the chain wrote the normalised value, read it back to add, and again to
// clamp it. The backward takes the gradient of the ReLU's output and masks it where y is not > 0, as ReLU's
// own backward does (folded in: no separate masked tensor; where there is an add, the masked gradient is
// the residual's, written in place of dy). It reads y where autograd's ReLU backward read it: y is kept
// (or computed again, In-Place) for the next layer's backward anyway, and neither the residual nor the bias
// is needed for the mask. Every part rounds as the separate ops do, so a fused op computes the chain's
// bits: the same kernels (kernels/norm.h) with an epilogue.
#include <string>
#include <vector>

#include "engine/base/registry.h"
#include "engine/graph/fusion.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/norm.h"
#include "engine/ops/norm_rows.h"
#include "kernels/norm.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace crumb {
namespace {

// The residual of a fused forward is its input after the normalisation's own (`plain` of them).
void check_residual(const Graph& g, const Node& n, std::size_t plain) {
  if (n.in.size() == plain) return;
  const Value& r = g.value(n.in[plain]);
  const Value& x = g.value(n.in[0]);
  if (r.dims != x.dims || r.batched != x.batched || r.dtype != x.dtype)
    ops::fail(n, "residual '" + r.name + "' " + dims_str(r.dims) + " does not match the input " + dims_str(x.dims));
}

// A fused forward's shape rule: the normalisation's (`plain`: its op) on the inputs without the residual.
void infer_fused(Graph& g, Node& n, const OpDef& plain, std::size_t inputs) {
  if (n.in.size() != inputs && n.in.size() != inputs + 1)
    ops::fail(n, "expects " + std::to_string(inputs) + " inputs and an optional residual");
  check_residual(g, n, inputs);
  Node norm = n;
  norm.in.resize(inputs);
  plain.infer(g, norm);
  n.geometry = norm.geometry;
}
void infer_bn_relu(Graph& g, Node& n) { infer_fused(g, n, kBatchNorm, 6); }
void infer_gn_relu(Graph& g, Node& n) { infer_fused(g, n, kGroupNorm, 3); }

// A fused backward's shape rule: in = (dy, x, weight, stats, y) (y: the fused forward's output, whose
// positives are where the ReLU passed), out = ([dr,] dweight, dbias[, dx]); the normalisation's backward
// rule on (dy, x, weight, stats) -> (dweight, dbias[, dx]).
void infer_fused_bwd(Graph& g, Node& n, const OpDef& plain, bool residual) {
  const std::size_t first = residual ? 1 : 0;
  if (n.in.size() != 5 || n.out.size() < first + 2 || n.out.size() > first + 3)
    ops::fail(n, std::string("expects (dy, x, w, stats, y) -> (") + (residual ? "dr, " : "") + "dw, db[, dx])");
  const Value &dy = g.value(n.in[0]), &y = g.value(n.in[4]);
  if (y.dims != dy.dims || y.batched != dy.batched || y.dtype != dy.dtype)
    ops::fail(n, "output '" + y.name + "' " + dims_str(y.dims) + " does not match the gradient " + dims_str(dy.dims));
  Node norm = n;
  norm.in = {n.in[0], n.in[1], n.in[2], n.in[3]};
  norm.out.assign(n.out.begin() + first, n.out.end());
  plain.infer(g, norm);
  if (residual) ops::set_out_dims(g, n, 0, dy.dims);
}
void infer_bn_relu_bwd(Graph& g, Node& n) { infer_fused_bwd(g, n, kBatchNormBwd, false); }
void infer_bn_add_relu_bwd(Graph& g, Node& n) { infer_fused_bwd(g, n, kBatchNormBwd, true); }
void infer_gn_relu_bwd(Graph& g, Node& n) { infer_fused_bwd(g, n, kGroupNormBwd, false); }
void infer_gn_add_relu_bwd(Graph& g, Node& n) { infer_fused_bwd(g, n, kGroupNormBwd, true); }

// in: x, weight, bias, stats[, r]  out: y
void infer_bn_apply_relu(Graph& g, Node& n) {
  if (n.out.size() != 1) ops::fail(n, "expects one output");
  infer_fused(g, n, kBatchNormApply, 4);
}

// Recomputed from the statistics the forward stored, as a plain BatchNorm is (engine/ops/norm.cc).
std::vector<ValueId> bn_relu_recompute(Graph& g, const Node& n, const std::vector<ValueId>& in) {
  std::vector<ValueId> apply_in{in[0], in[1], in[2], n.out[1]};
  if (in.size() == 7) apply_in.push_back(in[6]);
  return ops::add_recompute(g, n, kBatchNormApplyRelu, apply_in, 1);
}

// The residual input of a fused forward step (`plain` inputs before it), null without one.
template <class T> const T* residual(const StepArgs& a, std::size_t plain) {
  return a.node->in.size() > plain ? a.in<T>(static_cast<int>(plain)) : nullptr;
}
// A fused backward step's forward output, which gives where its ReLU passed, and the residual's gradient.
template <class T> NormReluGrad<T> relu_grad(const StepArgs& a, bool residual) {
  return {a.in<T>(4), residual ? a.out<T>(0) : nullptr};
}
bool has_residual_grad(const Node& n) { return n.def == &kBatchNormAddReluBwd || n.def == &kGroupNormAddReluBwd; }

template <class T> void bn_relu_fwd_cpu(const StepArgs& a) { ops::batch_norm_forward_cpu<T>(a, {residual<T>(a, 6), true}); }

template <class T> void bn_relu_bwd_cpu(const StepArgs& a) {
  using A = Arith<T>;
  const bool res = has_residual_grad(*a.node);
  const int o = res ? 1 : 0;
  cpu::batch_norm_backward<T>(a.out<A>(o), a.out<A>(o + 1), a.node->out.size() == o + 3u ? a.out<T>(o + 2) : nullptr,
                              a.in<T>(0), a.in<T>(1), a.in<A>(2), a.in<A>(3), ops::batch_norm_shape(a),
                              !ops::attrs<BatchNormAttrs>(*a.node).frozen, a.accumulate, relu_grad<T>(a, res));
}

template <class T> void bn_apply_relu_cpu(const StepArgs& a) {
  using A = Arith<T>;
  cpu::batch_norm_apply<T>(a.out<T>(0), a.in<T>(0), a.in<A>(1), a.in<A>(2), a.in<A>(3), ops::batch_norm_shape(a),
                           {residual<T>(a, 4), true});
}

cpu::GroupNormShape gn_shape(const StepArgs& a) { return ops::at_batch<cpu::GroupNormShape>(*a.node, a.n); }

template <class T> void gn_relu_fwd_cpu(const StepArgs& a) {
  using A = Arith<T>;
  cpu::group_norm_forward<T>(a.out<T>(0), a.out<A>(1), a.in<T>(0), a.in<A>(1), a.in<A>(2), gn_shape(a),
                             ops::attrs<GroupNormAttrs>(*a.node).eps, {residual<T>(a, 3), true});
}

template <class T> void gn_relu_bwd_cpu(const StepArgs& a) {
  using A = Arith<T>;
  const bool res = has_residual_grad(*a.node);
  const int o = res ? 1 : 0;
  cpu::group_norm_backward<T>(a.out<A>(o), a.out<A>(o + 1), a.node->out.size() == o + 3u ? a.out<T>(o + 2) : nullptr,
                              a.in<T>(0), a.in<T>(1), a.in<A>(2), a.in<A>(3), gn_shape(a), a.accumulate,
                              relu_grad<T>(a, res));
}

// ---- The rules. A chain is norm -> relu, or norm -> add -> relu where the normalised value is one of the
// add's operands (the first that qualifies: the residual block's main branch in the reference models),
// each intermediate value read by the next op alone. In the backward pass autograd left relu_backward
// (dy, y) -> g, and the normalisation's backward reading g: both become one fused backward node. The
// forward node takes the ReLU's place (the residual is computed by then), the backward node the ReLU
// backward's (the residual's gradient is read from there on).
struct Family {
  const OpDef &norm, &norm_bwd, &fused, &fused_add, &fused_bwd, &fused_add_bwd;
};

struct Chain {
  NodeId norm = -1, add = -1, relu = -1, relu_bwd = -1, norm_bwd = -1;
  ValueId residual = -1;
};

// The chain ending in ReLU node r, if it is one (norm < 0 otherwise).
Chain match(const Graph& g, const Readers& readers, const Family& f, NodeId r, bool with_add) {
  Chain c;
  const Node& relu = g.node(r);
  if (relu.def != &kRelu || relu.backward) return c;
  const ValueId s = relu.in[0];
  const NodeId sp = g.value(s).producer;
  if (sp < 0 || readers.only(s) != r) return c;
  const Node& before = g.node(sp);
  if (with_add) {
    if (before.def != &kAdd || before.backward || before.in[0] == before.in[1]) return c;
    for (int k = 0; k < 2 && c.norm < 0; ++k) {
      const ValueId z = before.in[k];
      const NodeId zp = g.value(z).producer;
      if (zp >= 0 && g.node(zp).def == &f.norm && !g.node(zp).backward && readers.only(z) == sp) {
        c.norm = zp;
        c.residual = before.in[1 - k];
      }
    }
    c.add = sp;
  } else if (before.def == &f.norm && !before.backward) {
    c.norm = sp;
  }
  if (c.norm < 0) return c;
  c.relu = r;
  // The backward nodes, if a gradient flows through the chain.
  const ValueId y = relu.out[0], x = g.node(c.norm).in[0];
  for (NodeId b : readers.of(y))
    if (g.node(b).def == &kReluBwd && g.node(b).in[1] == y) c.relu_bwd = b;
  if (c.relu_bwd < 0) return c;
  const ValueId dz = g.node(c.relu_bwd).out[0];
  for (NodeId b : readers.of(dz))
    if (g.node(b).def == &f.norm_bwd && g.node(b).in[0] == dz && g.node(b).in[1] == x) c.norm_bwd = b;
  // Without the add, the masked gradient must have no other reader; with it, the residual's gradient does.
  if (c.norm_bwd < 0 || (!with_add && readers.only(dz) != c.norm_bwd)) c.norm = -1;
  return c;
}

// Puts node `n` in slot `at` (its outputs' producer from now on) after checking it with its op's rule.
void place(Graph& g, NodeId at, Node n) {
  n.def->infer(g, n);
  for (ValueId v : n.out) g.value(v).producer = at;
  g.node(at) = std::move(n);
}

int fuse_chains(Graph& g, const Family& f, bool with_add) {
  const Readers readers(g);
  std::vector<NodeId> dead;
  int fused = 0;
  for (NodeId r = 0; r < g.num_nodes(); ++r) {
    const Chain c = match(g, readers, f, r, with_add);
    if (c.norm < 0) continue;
    const Node norm = g.node(c.norm);
    Node fwd = norm;
    fwd.def = with_add ? &f.fused_add : &f.fused;
    fwd.name = fused_name(norm.name, with_add ? std::vector<std::string>{"add", "relu"} : std::vector<std::string>{"relu"});
    fwd.out[0] = g.node(r).out[0];
    if (with_add) fwd.in.push_back(c.residual);
    // The fused backward reads y where relu_backward did, so it keeps nothing the chain did not.
    if (c.relu_bwd >= 0) {
      const Node& nb = g.node(c.norm_bwd);
      const Node& rb = g.node(c.relu_bwd);
      Node bwd = nb;
      bwd.def = with_add ? &f.fused_add_bwd : &f.fused_bwd;
      bwd.name = fwd.name + ".backward";
      bwd.in = {rb.in[0], nb.in[1], nb.in[2], nb.in[3], rb.in[1]};
      if (with_add) bwd.out.insert(bwd.out.begin(), rb.out[0]);
      place(g, c.relu_bwd, std::move(bwd));
      dead.push_back(c.norm_bwd);
    }
    place(g, r, std::move(fwd));
    dead.push_back(c.norm);
    if (with_add) dead.push_back(c.add);
    ++fused;
  }
  g.remove_nodes(dead);
  return fused;
}

const Family kBatchNormFamily{kBatchNorm, kBatchNormBwd, kBatchNormRelu, kBatchNormAddRelu, kBatchNormReluBwd,
                              kBatchNormAddReluBwd};
const Family kGroupNormFamily{kGroupNorm, kGroupNormBwd, kGroupNormRelu, kGroupNormAddRelu, kGroupNormReluBwd,
                              kGroupNormAddReluBwd};

}  // namespace

const OpDef kBatchNormRelu = OpDef("batch_norm_relu", infer_bn_relu)
                             .with_outputs({OutDType::Float, OutDType::Master, OutSpec::metric(OutDType::F64)})
                             .with_recompute(bn_relu_recompute).with_layouts(Layouts::Nhwc);
const OpDef kBatchNormAddRelu = OpDef("batch_norm_add_relu", infer_bn_relu)
                                .with_outputs({OutDType::Float, OutDType::Master, OutSpec::metric(OutDType::F64)})
                                .with_recompute(bn_relu_recompute).with_layouts(Layouts::Nhwc);
// dx may take dy's storage: the mask is then written over dy in the first pass and dx over it in the second,
// one stream of memory fewer in each (kernels/norm.h).
const OpDef kBatchNormReluBwd = OpDef("batch_norm_relu_backward", infer_bn_relu_bwd)
                                .with_outputs({OutDType::Float, OutDType::Float, OutDType::Float})
                                .with_required_outputs(2).with_inplace_output(2).with_layouts(Layouts::Nhwc);
const OpDef kBatchNormAddReluBwd = OpDef("batch_norm_add_relu_backward", infer_bn_add_relu_bwd)
                                   .with_outputs({OutDType::Float, OutDType::Float, OutDType::Float, OutDType::Float})
                                   .with_required_outputs(3).with_inplace(true).with_layouts(Layouts::Nhwc);
const OpDef kBatchNormApplyRelu = OpDef("batch_norm_apply_relu", infer_bn_apply_relu).with_inplace(true)
                                  .with_layouts(Layouts::Nhwc);
const OpDef kGroupNormRelu = OpDef("group_norm_relu", infer_gn_relu)
                             .with_outputs({OutDType::Float, OutDType::Master}).with_recompute(ops::recompute_clone)
                             .with_layouts(Layouts::Nhwc);
const OpDef kGroupNormAddRelu = OpDef("group_norm_add_relu", infer_gn_relu)
                                .with_outputs({OutDType::Float, OutDType::Master}).with_recompute(ops::recompute_clone)
                                .with_layouts(Layouts::Nhwc);
const OpDef kGroupNormReluBwd = OpDef("group_norm_relu_backward", infer_gn_relu_bwd)
                                .with_outputs({OutDType::Float, OutDType::Float, OutDType::Float})
                                .with_required_outputs(2).with_layouts(Layouts::Nhwc);
const OpDef kGroupNormAddReluBwd = OpDef("group_norm_add_relu_backward", infer_gn_add_relu_bwd)
                                   .with_outputs({OutDType::Float, OutDType::Float, OutDType::Float, OutDType::Float})
                                   .with_required_outputs(3).with_inplace(true).with_layouts(Layouts::Nhwc);

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  for (const OpDef* op : {&kBatchNormRelu, &kBatchNormAddRelu}) {
    t.add(*op, Device::CPU, DType::F32, OpImpl(bn_relu_fwd_cpu<float>).with_commit(ops::batch_norm_commit_cpu<float>));
    t.add(*op, Device::CPU, DType::F64, OpImpl(bn_relu_fwd_cpu<double>).with_commit(ops::batch_norm_commit_cpu<double>));
    t.add(*op, Device::CPU, DType::BF16, OpImpl(bn_relu_fwd_cpu<bf16>).with_commit(ops::batch_norm_commit_cpu<bf16>));
    t.add(*op, Device::CPU, DType::F16, OpImpl(bn_relu_fwd_cpu<f16>).with_commit(ops::batch_norm_commit_cpu<f16>));
  }
  CRUMB_CPU_ROWS16(t, kBatchNormReluBwd, bn_relu_bwd_cpu);
  CRUMB_CPU_ROWS16(t, kBatchNormAddReluBwd, bn_relu_bwd_cpu);
  CRUMB_CPU_ROWS16(t, kBatchNormApplyRelu, bn_apply_relu_cpu);
  CRUMB_CPU_ROWS16(t, kGroupNormRelu, gn_relu_fwd_cpu);
  CRUMB_CPU_ROWS16(t, kGroupNormAddRelu, gn_relu_fwd_cpu);
  CRUMB_CPU_ROWS16(t, kGroupNormReluBwd, gn_relu_bwd_cpu);
  CRUMB_CPU_ROWS16(t, kGroupNormAddReluBwd, gn_relu_bwd_cpu);

  // Their outputs are computed again from x for the backward pass (engine/strategy/in_place.h).
  for (const OpDef* op : {&kBatchNormRelu, &kBatchNormAddRelu, &kGroupNormRelu, &kGroupNormAddRelu}) add_in_place_op(*op);
  // The add chains first: norm -> relu would otherwise take none of them (its norm feeds the add), but
  // the order says what is meant.
  add_fusion_rule({"batch_norm+add+relu", 0, [](Graph& g) { return fuse_chains(g, kBatchNormFamily, true); }});
  add_fusion_rule({"group_norm+add+relu", 0, [](Graph& g) { return fuse_chains(g, kGroupNormFamily, true); }});
  add_fusion_rule({"batch_norm+relu", 1, [](Graph& g) { return fuse_chains(g, kBatchNormFamily, false); }});
  add_fusion_rule({"group_norm+relu", 1, [](Graph& g) { return fuse_chains(g, kGroupNormFamily, false); }});
}

}  // namespace crumb

#if CRUMB_HAVE_CUDA
// The fused ops' CUDA rows: the normalisation kernels (kernels/cuda/norm.cu) with their epilogues, on the
// compute stream; BatchNorm's run NHWC natively, as the plain op's do.
namespace crumb::cuda_rows {

namespace {

// residual, relu_grad, has_residual_grad and gn_shape are the CPU rows' (above).
template <class T> void bn_relu_fwd(const StepArgs& a) { batch_norm_forward<T>(a, {residual<T>(a, 6), true}); }

template <class T> void bn_relu_bwd(const StepArgs& a) {
  const bool res = has_residual_grad(*a.node);
  const int o = res ? 1 : 0;
  cuda::batch_norm_backward(a.out<float>(o), a.out<float>(o + 1),
                            a.node->out.size() == o + 3u ? a.out<T>(o + 2) : nullptr, a.in<T>(0), a.in<T>(1),
                            a.in<float>(2), a.in<float>(3), batch_norm_shape(a),
                            !ops::attrs<BatchNormAttrs>(*a.node).frozen, a.accumulate, a.workspace, a.workspace_bytes,
                            cuda::CudaBackend::of(a).compute(), relu_grad<T>(a, res));
}

template <class T> void bn_apply_relu(const StepArgs& a) {
  cuda::batch_norm_apply(a.out<T>(0), a.in<T>(0), a.in<float>(1), a.in<float>(2), a.in<float>(3), batch_norm_shape(a),
                         cuda::CudaBackend::of(a).compute(), {residual<T>(a, 4), true});
}

template <class T> void gn_relu_fwd(const StepArgs& a) {
  cuda::group_norm_forward(a.out<T>(0), a.out<float>(1), a.in<T>(0), a.in<float>(1), a.in<float>(2), gn_shape(a),
                           ops::attrs<GroupNormAttrs>(*a.node).eps, cuda::CudaBackend::of(a).compute(),
                           {residual<T>(a, 3), true});
}

template <class T> void gn_relu_bwd(const StepArgs& a) {
  const bool res = has_residual_grad(*a.node);
  const int o = res ? 1 : 0;
  cuda::group_norm_backward(a.out<float>(o), a.out<float>(o + 1),
                            a.node->out.size() == o + 3u ? a.out<T>(o + 2) : nullptr, a.in<T>(0), a.in<T>(1),
                            a.in<float>(2), a.in<float>(3), gn_shape(a), a.accumulate,
                            cuda::CudaBackend::of(a).compute(), relu_grad<T>(a, res));
}

}  // namespace

CRUMB_ON_LOAD {
  ImplTable& t = impl_table();
  for (const OpDef* op : {&kBatchNormRelu, &kBatchNormAddRelu})
    CRUMB_CUDA_ROWS(t, *op, bn_relu_fwd,
                    .with_commit(batch_norm_commit).with_workspace(batch_norm_forward_workspace).with_nhwc(true));
  for (const OpDef* op : {&kBatchNormReluBwd, &kBatchNormAddReluBwd})
    CRUMB_CUDA_ROWS(t, *op, bn_relu_bwd, .with_workspace(batch_norm_backward_workspace).with_nhwc(true));
  CRUMB_CUDA_ROWS(t, kBatchNormApplyRelu, bn_apply_relu, .with_nhwc(true));
  for (const OpDef* op : {&kGroupNormRelu, &kGroupNormAddRelu}) CRUMB_CUDA_ROWS(t, *op, gn_relu_fwd);
  for (const OpDef* op : {&kGroupNormReluBwd, &kGroupNormAddReluBwd}) CRUMB_CUDA_ROWS(t, *op, gn_relu_bwd);
}

}  // namespace crumb::cuda_rows
#endif  // CRUMB_HAVE_CUDA
