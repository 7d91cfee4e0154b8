// An op is declared once (OpDef): shape rule, output dtypes, typed attributes, backward rule, in-place
// and view permissions. It is implemented per (device, dtype) as rows of one table (OpImpl: run,
// workspace, prepare), bound next to the declaration: engine/ops/<op>.cc holds the declaration and its
// CPU rows, engine/ops/<op>_cuda.cc its CUDA rows. Adding a device or a dtype adds rows, not fields.
// Nodes point at their OpDef.
#pragma once
#include <any>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/graph/graph.h"
#include "kernels/cpu/shapes.h"
#include "kernels/dropout_mask.h"

namespace crumb {

class Backend;
class GradBuilder;

// Per-node state an implementation builds once per compiled plan (cuDNN descriptors and algorithms).
struct OpState {
  virtual ~OpState() = default;
};

// What one step of the executor sees at run time. Pointers are resolved once at compile time into
// the executor's table; only the batch size n and the write mode change between micro-batches.
class CopyQueue;

struct StepArgs {
  Backend* backend = nullptr;  // the device the step runs on (its streams and library handles)
  const Graph* graph = nullptr;
  const Node* node = nullptr;
  void* const* ptr = nullptr;  // ValueId -> data
  int n = 0;                   // samples in this micro-batch (<= the compiled micro-batch size)
  bool accumulate = false;     // write mode of the node's gradient outputs (+= when true)
  double loss_scale = 1.0;     // 1/B: the loss of a micro-batch is its sum over samples / B
  void* workspace = nullptr;   // workspace_bytes bytes, 256-byte aligned
  std::size_t workspace_bytes = 0;  // the step's workspace at the compiled micro-batch size (>= at n)
  OpState* state = nullptr;    // the backend's per-node state, if it built one
  bool training = true;         // a training pass (forward + backward), or evaluation
  bool last = true;             // the batch's last micro-batch: per-batch totals are complete after it
  // With last: commit the per-batch totals in this run (BatchNorm's deferred running statistics). False in
  // data-parallel training, where each rank's totals are merged over the ranks first and then committed
  // by the implementation's commit function (Executor::commit_totals).
  bool commit = true;
  const RandomKey* random = nullptr;  // this micro-batch's key for random ops, in the device's memory
  CopyQueue* copies = nullptr;        // the executor's copies to and from the host pool (swap ops), if any

  template <class T> T* out(int i = 0) const { return static_cast<T*>(ptr[node->out[i]]); }
  template <class T> const T* in(int i) const { return static_cast<const T*>(ptr[node->in[i]]); }
  const Value& in_value(int i) const { return graph->value(node->in[i]); }
  const Value& out_value(int i = 0) const { return graph->value(node->out[i]); }
};

using StepFn = void (*)(const StepArgs&);

// The dtype of an op's output: the graph's float dtype (F32 to train, F64 for gradient checks), or a
// fixed one (the max pool's 1-byte argmax, a loss op's F64 loss sum and I64 correct count).
enum class OutDType : uint8_t { Float, U8, F64, I64 };
// One declared output. A metric output is an unbatched scalar the op adds into over the micro-batches
// of a batch (ValueKind::Metric): the executor zeroes it at a batch's first micro-batch.
struct OutSpec {
  OutSpec(OutDType d) : dtype(d) {}  // a batched output of dtype d
  static OutSpec metric(OutDType d) {
    OutSpec s(d);
    s.is_metric = true;
    return s;
  }
  OutDType dtype;
  bool is_metric = false;
};

// Written with its fields named, as an immediately invoked lambda:
//   const OpDef kRelu = [] {
//     OpDef d;
//     d.name = "relu";
//     d.infer = infer_same;
//     d.inplace = true;
//     return d;
//   }();
struct OpDef {
  const char* name = nullptr;
  // Validates the inputs, sets (or checks) the dims of node.out and stores the node's kernel geometry
  // (Node::geometry), computed here once; throws crumb::Error naming the layer.
  void (*infer)(Graph& g, Node& n) = nullptr;
  // Emits the backward nodes for n given the gradients of its outputs (null: no gradient flows).
  void (*backward)(GradBuilder& gb, const Node& n) = nullptr;
  // Its outputs, in order (Graph::apply creates them); one in the graph's float dtype unless set.
  std::vector<OutSpec> outputs = {OutDType::Float};
  // out[0] may take over in[0]'s storage when in[0] is not used afterwards (ReLU, ReLU backward).
  bool inplace = false;
  // out[0] is a view of in[0]: no computation, no storage of its own (reshape/flatten).
  bool view = false;
  // Outputs after the first this many are optional (a bias gradient); 0: all are required.
  std::size_t required_outputs = 0;
  // Reads StepArgs::random (dropout): the executor then writes each micro-batch's key before running it.
  bool random = false;
  // How the backward pass may compute n's outputs again instead of keeping them (engine/strategy/recompute.h):
  // adds the node(s) that do, reading `in` in place of n.in, and returns per output of n the value that
  // holds it again (-1 for one it does not recompute). Null: the op cannot be recomputed (a loss op adds
  // into its metrics). Whether recomputing is worth it is the memory strategy's call, by measured cost.
  std::vector<ValueId> (*recompute)(Graph& g, const Node& n, const std::vector<ValueId>& in) = nullptr;
};

// One implementation of an op for one (device, dtype), written with its fields named:
//   OpImpl(run).with_prepare(prepare).with_workspace(workspace)
struct OpImpl {
  using PrepareFn = std::unique_ptr<OpState> (*)(const Graph& g, const Node& n, int max_batch, Backend& backend);
  using WorkspaceFn = std::size_t (*)(const Graph& g, const Node& n, int batch, const OpState* state);

  explicit OpImpl(StepFn run_fn = nullptr) : run(run_fn) {}
  OpImpl& with_prepare(PrepareFn f) { prepare = f; return *this; }
  OpImpl& with_workspace(WorkspaceFn f) { workspace = f; return *this; }
  OpImpl& with_commit(StepFn f) { commit = f; return *this; }

  StepFn run = nullptr;
  // Per-node state built once per compiled plan for its largest micro-batch, on the backend it will
  // run on (null: none).
  PrepareFn prepare = nullptr;
  // Scratch bytes a run of up to `batch` samples needs, given prepare()'s state (null: none).
  WorkspaceFn workspace = nullptr;
  // Commits the per-batch totals a last micro-batch run with StepArgs::commit false left in the node's
  // metric outputs (null: the op keeps none).
  StepFn commit = nullptr;
};

// The implementation table. Each op family adds its rows when the library loads, from the file that
// defines them (CRUMB_ON_LOAD, engine/base/registry.h), before the first lookup; a missing row is null.
class ImplTable {
 public:
  void add(const OpDef& op, Device device, DType dtype, OpImpl impl);
  const OpImpl* find(const OpDef& op, Device device, DType dtype) const;

 private:
  struct Row {
    const OpDef* op;
    Device device;
    DType dtype;
    OpImpl impl;
  };
  std::vector<Row> rows_;
};
ImplTable& impl_table();

// Typed attributes: what a layer's builder sets (Node::attrs) and its backward nodes copy.
struct WindowAttrs {  // conv2d, max/avg pooling
  int kh = 0, kw = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
};
struct ReshapeAttrs {
  Dims dims;  // target per-sample dims
};
// How BatchNorm updates its running statistics in training (--bn-stats).
enum class BnStats : uint8_t {
  Deferred,  // the whole batch's mean and variance, merged exactly over its groups: one update per step
  PerGroup,  // one update per group, as PyTorch does per forward under gradient accumulation
};
struct BatchNormAttrs {
  int group = 32;  // samples per normalisation group; 0: the whole micro-batch is one group
  BnStats stats = BnStats::Deferred;
  bool frozen = false;  // normalise with the running statistics in training too (PyTorch's eval() layer)
  double eps = 1e-5, momentum = 0.1;
};
// Dropout: zero each element with probability p in training, scale the kept ones by 1 / (1 - p) (PyTorch's
// inverted dropout); the identity in evaluation.
// A copy between the arena and the host pool (engine/strategy/swap.h): its ticket in the executor's CopyQueue.
struct SwapAttrs {
  int ticket = 0;
};
struct DropoutAttrs {
  double p = 0.5;
  uint64_t layer = 0;  // tells the layers' masks apart: a hash of the layer's name (nn::dropout)
  // The kernels' form of p (kernels/dropout_mask.h): drop below p * 2^32, scale the rest by 1 / (1 - p).
  uint32_t threshold() const { return static_cast<uint32_t>(p * 4294967296.0); }
  double scale() const { return 1.0 / (1.0 - p); }
};
// adaptive_avg_pool2d's output size (PyTorch's AdaptiveAvgPool2d((h_out, w_out))).
struct AdaptivePoolAttrs {
  int h_out = 1, w_out = 1;
};
struct GroupNormAttrs {
  int groups = 32;  // channel groups; must divide the channels
  double eps = 1e-5;
};
// Kernel geometries a shape rule stores on its node (conv and pooling store cpu::Conv2dShape and
// cpu::Pool2dShape with n = 1).
struct LinearGeometry {  // x [n, in], w [out, in]
  int in = 0, out = 0;
};
struct GlobalPoolGeometry {  // x [n, c, h, w] with hw = h * w
  int c = 0, hw = 0;
};
struct ClassesGeometry {  // logits [n, k]
  int k = 0;
};

// Forward ops (what models are built from) and the backward ops their rules emit.
extern const OpDef kLinear, kLinearBwdData, kLinearBwdWeight;
extern const OpDef kConv2d, kConv2dBwdData, kConv2dBwdWeight;
extern const OpDef kMaxPool2d, kMaxPool2dBwd, kAvgPool2d, kAvgPool2dBwd, kGlobalAvgPool, kGlobalAvgPoolBwd;
extern const OpDef kAdaptiveAvgPool2d, kAdaptiveAvgPool2dBwd;
extern const OpDef kDropout, kDropoutBwd;
extern const OpDef kBatchNorm, kBatchNormBwd, kBatchNormApply, kGroupNorm, kGroupNormBwd;
extern const OpDef kSwapCopy, kSwapWait;
extern const OpDef kRelu, kReluBwd;
extern const OpDef kReshape;
extern const OpDef kAdd;
extern const OpDef kSoftmaxXent, kSoftmaxXentBwd;

// What BatchNorm asks of the micro-batches of a training batch: every one but the batch's last must hold
// whole normalisation groups, so the result does not depend on the micro-batch size. Returns the sample
// count micro-batches must be a multiple of (1 without BatchNorm, the least common multiple of the
// layers' groups), or 0 when a layer normalises a whole micro-batch: the batch must then run as one.
int micro_batch_multiple(const Graph& g);

// Helpers shared by the op files.
namespace ops {
// Throws "layer '<name>' (<op>): <message>".
[[noreturn]] void fail(const Node& n, const std::string& message);
// Checks in.size() within [lo, hi] and out.size() == outs.
void expect_arity(const Node& n, size_t lo, size_t hi, size_t outs);
// Sets the dims of out[i] if it is new (empty dims and not yet produced), else checks they match.
void set_out_dims(Graph& g, const Node& n, int i, const Dims& dims);
// The node's attributes or geometry as T; a node built without them is an error naming the layer.
template <class T> const T& attrs(const Node& n) {
  const T* a = std::any_cast<T>(&n.attrs);
  if (!a) fail(n, "missing attributes");
  return *a;
}
template <class T> const T& geometry(const Node& n) {
  const T* s = std::any_cast<T>(&n.geometry);
  if (!s) fail(n, "missing kernel geometry");
  return *s;
}
// The node's geometry with its batch set to n samples (conv/pool kernel shapes).
template <class Shape> Shape at_batch(const Node& node, int n) {
  Shape s = geometry<Shape>(node);
  s.n = n;
  return s;
}
// The window fields of a conv/pool kernel shape (spatial extent, kernel, stride, padding, floor-mode
// output extent) from per-sample [c, h, w] dims and the node's attributes; batch 1.
template <class Shape> void set_window(Shape& s, const Dims& x, const WindowAttrs& a) {
  s.n = 1;
  s.h = static_cast<int>(x[1]);
  s.w = static_cast<int>(x[2]);
  s.kh = a.kh;
  s.kw = a.kw;
  s.stride_h = a.stride_h;
  s.stride_w = a.stride_w;
  s.pad_h = a.pad_h;
  s.pad_w = a.pad_w;
  s.h_out = (s.h + 2 * s.pad_h - s.kh) / s.stride_h + 1;
  s.w_out = (s.w + 2 * s.pad_w - s.kw) / s.stride_w + 1;
}
// The backward rule of a weighted layer (linear, conv2d) with in = (x, w[, b]): dx = bwd_data(dy, w)
// when x needs a gradient, and (dw[, db]) = bwd_weight(dy, x) in the parameters' write mode. The
// backward nodes carry the forward's attributes and geometry.
void weighted_backward(GradBuilder& gb, const Node& n, const OpDef& bwd_data, const OpDef& bwd_weight);
// A BatchNorm step's kernel shape at its batch (group 0, the whole micro-batch, becomes n).
cpu::BatchNormShape batch_norm_shape(const StepArgs& a);
// Elements of out[0] at the step's batch (elementwise ops).
inline std::size_t out_count(const StepArgs& a) { return static_cast<std::size_t>(a.out_value().count(a.n)); }
// What the name of a node recomputing layer L is: L followed by this (engine/strategy/cost_model.h prices it as L).
inline constexpr std::string_view kRecomputeSuffix = ".recompute";
// Adds the node recomputing n's first `outputs` outputs with op `def` on `in` (n's attributes and geometry,
// named after n); returns per output of n its recomputed value, -1 past `outputs`.
std::vector<ValueId> add_recompute(Graph& g, const Node& n, const OpDef& def, std::vector<ValueId> in,
                                   std::size_t outputs);
// The recompute rule of a pure op: the same op again on `in`, every output recomputed.
std::vector<ValueId> recompute_clone(Graph& g, const Node& n, const std::vector<ValueId>& in);
// Adds the rows of a templated CPU implementation for both float dtypes; the optional last argument
// names the other fields: CRUMB_CPU_ROWS(t, op, run, .with_workspace(ws)).
#define CRUMB_CPU_ROWS(table, op, fn, ...)                                     \
  do {                                                                         \
    (table).add(op, Device::CPU, DType::F32, OpImpl(fn<float>) __VA_ARGS__);  \
    (table).add(op, Device::CPU, DType::F64, OpImpl(fn<double>) __VA_ARGS__); \
  } while (0)
}  // namespace ops

}  // namespace crumb
