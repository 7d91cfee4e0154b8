// An op is declared once (OpDef): shape rule, output dtypes, typed attributes, backward rule, in-place
// and view permissions. It is implemented per (device, dtype) as rows of one table (OpImpl: run,
// workspace, prepare), bound next to the declaration: engine/ops/<family>.h declares a family's OpDefs,
// attributes and graph builders (nn::), engine/ops/<family>.cc defines them and binds the CPU rows and
// (in CUDA builds) the CUDA rows, each when the library loads. Adding a device or a
// dtype adds rows, not fields. Nodes point at their OpDef. This header is the op interface only: it
// names no op.
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

// The dtype of an op's output: the graph's float dtype (F32 to train, F64 for gradient checks, 16-bit
// in mixed precision), its master dtype (Graph::master_dtype), or a fixed one (the max pool's 1-byte
// argmax, a loss op's F64 loss sum and I64 correct count). Gradients of parameters are always in the
// master dtype, whatever the op declares for them.
enum class OutDType : uint8_t { Float, U8, F64, I64, Master };
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

// Which layouts an op's nodes may run in (engine/plan/layout.h). Nchw: only NCHW (ops that read
// positions: reshape, linear, losses). Any: the op treats its inputs as flat arrays of equal shape, so it
// runs in whatever layout its inputs share (ReLU, add, casts). Nhwc: the op computes over [C, H, W] and
// runs channels-last too: through its rows' NHWC support (OpImpl::nhwc) or, where a row lacks it, on
// NCHW copies of its operands (engine/device/widen.h).
enum class Layouts : uint8_t { Nchw, Any, Nhwc };

// Written with its fields named: OpDef(name, infer), then a setter for each other field that is not its
// default, e.g. OpDef("relu", infer_same).with_backward(relu_backward).with_inplace(true).
struct OpDef {
  using InferFn = void (*)(Graph& g, Node& n);
  using BackwardFn = void (*)(GradBuilder& gb, const Node& n);
  using RecomputeFn = std::vector<ValueId> (*)(Graph& g, const Node& n, const std::vector<ValueId>& in);
  using FlopsFn = double (*)(const Graph& g, const Node& n, int batch);

  OpDef(const char* op_name, InferFn infer_fn) : name(op_name), infer(infer_fn) {}
  OpDef& with_backward(BackwardFn f) { backward = f; return *this; }
  OpDef& with_outputs(std::vector<OutSpec> o) { outputs = std::move(o); return *this; }
  OpDef& with_inplace(bool b) { inplace = b; return *this; }
  OpDef& with_inplace_output(int i) { inplace = true; inplace_output = i; return *this; }
  OpDef& with_view(bool b) { view = b; return *this; }
  OpDef& with_required_outputs(std::size_t n) { required_outputs = n; return *this; }
  OpDef& with_random(bool b) { random = b; return *this; }
  OpDef& with_recompute(RecomputeFn f) { recompute = f; return *this; }
  OpDef& with_flops(FlopsFn f) { flops = f; return *this; }
  OpDef& with_layouts(Layouts l) { layouts = l; return *this; }
  OpDef& with_lean_variant(bool b) { lean_variant = b; return *this; }

  const char* name;
  // Validates the inputs, sets (or checks) the dims of node.out and stores the node's kernel geometry
  // (Node::geometry), computed here once; throws crumb::Error naming the layer.
  InferFn infer;
  // Emits the backward nodes for n given the gradients of its outputs (null: no gradient flows).
  BackwardFn backward = nullptr;
  // Its outputs, in order (Graph::apply creates them); one in the graph's float dtype unless set.
  std::vector<OutSpec> outputs = {OutDType::Float};
  // out[inplace_output] (where the node has it) may take over in[0]'s storage when in[0] is not used
  // afterwards (ReLU, ReLU backward; a fused BatchNorm + ReLU backward's dx).
  bool inplace = false;
  int inplace_output = 0;
  // out[0] is a view of in[0]: no computation, no storage of its own (reshape/flatten).
  bool view = false;
  // Its CPU rows have a variant with less workspace, slower, with the same bits (Node::lean runs it).
  bool lean_variant = false;
  // Outputs after the first this many are optional (a bias gradient); 0: all are required.
  std::size_t required_outputs = 0;
  // Reads StepArgs::random (dropout): the executor then writes each micro-batch's key before running it.
  bool random = false;
  // How the backward pass may compute n's outputs again instead of keeping them (engine/strategy/recompute.h):
  // adds the node(s) that do, reading `in` in place of n.in, and returns per output of n the value that
  // holds it again (-1 for one it does not recompute). Null: the op cannot be recomputed (a loss op adds
  // into its metrics). Whether recomputing is worth it is the memory strategy's call, by measured cost.
  RecomputeFn recompute = nullptr;
  // Floating-point operations of one run at `batch` samples (a multiply-add counts as two), for GEMM-like
  // ops, which are judged by the rate they compute at (tools/bench/kernels); null: the op streams memory.
  FlopsFn flops = nullptr;
  Layouts layouts = Layouts::Nchw;
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
  OpImpl& with_nhwc(bool b) { nhwc = b; return *this; }

  StepFn run = nullptr;
  // Per-node state built once per compiled plan for its largest micro-batch, on the backend it will
  // run on (null: none).
  PrepareFn prepare = nullptr;
  // Scratch bytes a run of up to `batch` samples needs, given prepare()'s state (null: none).
  WorkspaceFn workspace = nullptr;
  // Commits the per-batch totals a last micro-batch run with StepArgs::commit false left in the node's
  // metric outputs (null: the op keeps none).
  StepFn commit = nullptr;
  // run reads Node::layout and handles NHWC nodes itself (cuDNN's channels-last descriptors); false: an
  // NHWC node runs this row on NCHW copies of its image operands (engine/device/widen.h).
  bool nhwc = false;
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

// Typed attributes (Node::attrs: what a layer's builder sets and its backward nodes copy) and kernel
// geometries (Node::geometry: what a shape rule computes once) are declared by each op family, in
// engine/ops/<family>.h, with the family's OpDefs and graph builders.

// Helpers shared by the op files.
namespace ops {
// Throws "layer '<name>' (<op>): <message>".
[[noreturn]] void fail(const Node& n, const std::string& message);
// How many inputs and outputs a node must have, named at the call: expect_arity(n, inputs(2, 3), outputs(1)).
struct Inputs {
  size_t lo, hi;
};
struct Outputs {
  size_t count;
};
inline Inputs inputs(size_t count) { return {count, count}; }
inline Inputs inputs(size_t lo, size_t hi) { return {lo, hi}; }
inline Outputs outputs(size_t count) { return {count}; }
// Checks in.size() within [in.lo, in.hi] and out.size() == out.count.
void expect_arity(const Node& n, Inputs in, Outputs out);
// Sets the dims of out[i] if it is new (empty dims and not yet produced), else checks they match.
void set_out_dims(Graph& g, const Node& n, int i, const Dims& dims);
// The shape rule of an elementwise op: 1..2 inputs shaped alike, one output shaped like them.
void infer_same(Graph& g, Node& n);
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
// The backward rule of a weighted layer (linear, conv2d) with in = (x, w[, b]): dx = bwd_data(dy, w)
// when x needs a gradient, and (dw[, db]) = bwd_weight(dy, x) in the parameters' write mode. The
// backward nodes carry the forward's attributes and geometry.
void weighted_backward(GradBuilder& gb, const Node& n, const OpDef& bwd_data, const OpDef& bwd_weight);
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
// CRUMB_CPU_ROWS and the rows of 16-bit graphs, for an implementation templated on the storage type of
// the graph's float values (float, double, bf16, f16: kernels/half.h) whose 16-bit kernels compute in
// float32.
#define CRUMB_CPU_ROWS16(table, op, fn, ...)                                            \
  do {                                                                                  \
    CRUMB_CPU_ROWS(table, op, fn, __VA_ARGS__);                                         \
    (table).add(op, Device::CPU, DType::BF16, OpImpl(fn<::crumb::bf16>) __VA_ARGS__);   \
    (table).add(op, Device::CPU, DType::F16, OpImpl(fn<::crumb::f16>) __VA_ARGS__);     \
  } while (0)
}  // namespace ops

}  // namespace crumb
