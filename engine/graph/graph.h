// The IR: values and nodes of a static graph with a symbolic batch dimension. A model is built into a
// Graph (forward), autograd appends the backward nodes to the same Graph, the planner and executor
// consume it. Batched values store their per-sample dims; the batch size is bound at compile/run time.
#pragma once
#include <any>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/base/tensor.h"

namespace crumb {

struct OpDef;
enum class OutDType : uint8_t;
using ValueId = int;
using NodeId = int;

enum class ValueKind : uint8_t {
  Input,       // fed from outside per micro-batch (images, labels): lives in input staging
  Param,       // persistent, trained
  ParamGrad,   // persistent, accumulated over the micro-batches of a batch
  State,       // persistent, not trained (BatchNorm running statistics, counters): in the parameter store,
               // saved in checkpoints, never touched by the optimizer
  Activation,  // everything else: lives in the arena for its lifetime only
  Metric,      // a per-batch total a loss op adds into (loss sum, correct count): an unbatched scalar,
               // zeroed by a batch's first micro-batch, read after its last
};

// How a parameter starts. Uniform is PyTorch's default for Linear/Conv2d (both weight and bias uniform in
// +-1/sqrt(fan_in), i.e. kaiming_uniform_(a=sqrt(5)) for the weight); Normal is N(0, std^2) (torchvision's
// kaiming_normal_(mode="fan_out") for ResNet convolutions); Constant fills (BatchNorm's weight 1, bias 0).
struct ParamInit {
  enum class Kind : uint8_t { Uniform, Normal, Constant };
  int64_t fan_in = 1;
  double fill = 0;  // Constant, and State values: every element starts at this value (running_var 1)
  Kind kind = Kind::Uniform;
  double std = 0;  // Normal
  static ParamInit constant(double v) { return {1, v, Kind::Constant, 0}; }
  static ParamInit normal(double std) { return {1, 0, Kind::Normal, std}; }
};

struct Value {
  std::string name;
  ValueKind kind = ValueKind::Activation;
  DType dtype = DType::F32;
  Dims dims;             // per-sample dims if batched, full dims otherwise
  bool batched = false;  // has a leading symbolic batch dimension
  NodeId producer = -1;
  ValueId view_of = -1;  // shares the storage of this value (reshape views)
  bool requires_grad = false;
  bool host = false;     // lives in the host pool, not the arena (swapped-out copies, engine/strategy/swap.h)
  ValueId grad = -1;     // Param: its ParamGrad value; Input with requires_grad: its gradient
  // The memory order of an image value (batched [C, H, W], or a filter copy [K, C, R, S]); NHWC only
  // where the channels-last rewrite (engine/plan/layout.h) made it so.
  Layout layout = Layout::NCHW;
  ParamInit init;

  int64_t count(int64_t batch) const { return dims_count(dims) * (batched ? batch : 1); }
};

// How an op writes its parameter-gradient outputs across the micro-batches of one batch.
enum class GradWrite : uint8_t {
  None,              // outputs are activations: always written (=)
  FirstMicroBatch,   // first writer of a parameter gradient: = on the first micro-batch, += after
  Accumulate,        // a later writer of the same gradient (shared weights): always +=
};

struct Node {
  const OpDef* def = nullptr;
  std::string name;  // layer name, used in error messages and reports
  std::vector<ValueId> in, out;
  std::any attrs;     // the op's own attribute struct (engine/graph/op.h), if it has one
  std::any geometry;  // the kernel shape the op's shape rule computed once (per sample), if any
  bool backward = false;  // part of the derived backward graph
  // Added by a memory strategy (engine/strategy/swap.h, engine/strategy/recompute.h): a copy to or from the host pool, or a
  // forward node cloned into the backward pass. Runs in training passes only.
  bool train_only = false;
  GradWrite grad_write = GradWrite::None;
  // The layout its image inputs and outputs are in (engine/plan/layout.h): an NHWC node's rows read and
  // write channels-last memory, natively or through transposed copies (engine/device/widen.h).
  Layout layout = Layout::NCHW;
  // Runs the op's variant with less workspace (OpDef::lean_variant; where a row has none, its own): the
  // memory strategy (engine/strategy/memory_strategy.h) takes it where a step's workspace sets the peak.
  bool lean = false;
};

class Graph {
 public:
  ValueId add_value(Value v);
  // Adds a node whose output values already exist; runs the op's shape rule (throws on mismatch).
  NodeId add_node(Node n);
  // Convenience: new Activation outputs of the dtypes the op declares, shaped by its shape rule
  // (out[0] named `name`, further ones "<name>:1", ...); returns out[0].
  ValueId apply(const OpDef& def, std::vector<ValueId> in, const std::string& name, std::any attrs = {});

  // A new activation shaped like v (dtype, dims, batching, layout), named `name`, not yet produced: a gradient of v,
  // or a copy of it that a rewrite recomputes or swaps.
  ValueId add_like(ValueId v, std::string name);

  // A graph input of the float dtype (images), or I32 (labels). In a mixed-precision graph the input
  // the caller binds is float32 and this returns its cast to the 16-bit float dtype, which the layers
  // build on (as autocast casts a float32 input where a 16-bit op takes it).
  ValueId input(const std::string& name, Dims per_sample, DType dtype = DType::F32, bool requires_grad = false);
  // A trained parameter. Its Value dtype is what the ops read: the float dtype (Compute: convolution and
  // linear weights, 16-bit in mixed precision) or the master dtype (Master: normalisation scales and
  // shifts, float32 as autocast keeps them). Either way the parameter store keeps it, and its gradient,
  // in the master dtype (engine/run/params.h).
  enum class ParamDType : uint8_t { Compute, Master };
  ValueId param(const std::string& name, Dims dims, ParamInit init, ParamDType dtype = ParamDType::Compute);
  // Persistent, non-trained state (unbatched), every element starting at `fill`; its dtype is the master
  // dtype unless given (I64 for counters such as num_batches_tracked).
  ValueId state(const std::string& name, Dims dims, double fill, DType dtype = DType::F32);
  // Marks the training loss (the output of a loss op). The forward ends there.
  void set_loss(ValueId v) { loss_ = v; }

  const Value& value(ValueId v) const { return values_.at(v); }
  Value& value(ValueId v) { return values_.at(v); }
  const Node& node(NodeId n) const { return nodes_.at(n); }
  Node& node(NodeId n) { return nodes_.at(n); }
  int num_values() const { return static_cast<int>(values_.size()); }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  // Puts the nodes in this execution order (a permutation of all node ids); node ids change accordingly.
  // Every node must still come after the producers of its inputs.
  void reorder(const std::vector<NodeId>& order);
  // Removes these nodes (a rewrite replaced them); the others keep their order, and their ids change
  // accordingly. Nothing left may read an output of a removed node: those values stay in the graph,
  // unproduced and unread.
  void remove_nodes(const std::vector<NodeId>& ids);

  const std::vector<ValueId>& params() const { return params_; }
  const std::vector<ValueId>& states() const { return states_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  ValueId loss() const { return loss_; }
  ValueId find_value(const std::string& name) const;  // the first value of that name, -1 if absent
  // Follows view_of to the value that owns the storage.
  ValueId storage_root(ValueId v) const;
  // The dtype of this graph's floating-point activations and their gradients: F32 for training, F64
  // for checks, BF16 or F16 in mixed precision (docs/precision.md).
  DType float_dtype() const { return float_dtype_; }
  // The dtype of parameters, their gradients, optimizer state and statistics: F64 in an F64 graph, else F32.
  DType master_dtype() const { return float_dtype_ == DType::F64 ? DType::F64 : DType::F32; }
  // The dtype an op output of this dtype rule has in this graph.
  DType dtype_of(OutDType t) const;
  void set_float_dtype(DType t) { float_dtype_ = t; }
  // Whether float32 matrix products and convolutions may round their operands to TF32 on devices with
  // tensor cores (CUDA: cuBLAS and cuDNN tensor-op math). Faster, about 1e-3 relative error per product;
  // off by default, so every device computes the same float32 function. The CPU has no TF32 and ignores it.
  bool tf32() const { return tf32_; }
  void set_tf32(bool on) { tf32_ = on; }
  // Whether the device may only run algorithms that give the same bits on every run (CUDA: cuDNN's
  // deterministic convolution algorithms, as torch.backends.cudnn.deterministic). Off by default: some of
  // cuDNN's fastest backward algorithms add with atomics. The CPU is deterministic either way.
  bool deterministic() const { return deterministic_; }
  void set_deterministic(bool on) { deterministic_ = on; }
  // Which CPU algorithm stride-1 3x3 convolutions run (engine/ops/conv2d_algo.h): Direct (the default)
  // and Winograd force one; Measure times the default kernels against Winograd F(2x2, 3x3) per pass and
  // shape, as cuDNN's find does (torch.backends.cudnn.benchmark), opt-in for the same reason as there: a
  // measurement can come out either way in another process, and Winograd rounds and sizes its workspace
  // differently, so two runs would no longer compute the same bits or plan the same memory.
  enum class ConvAlgo { Measure, Direct, Winograd };
  ConvAlgo conv_algo() const { return conv_algo_; }
  void set_conv_algo(ConvAlgo a) { conv_algo_ = a; }
  // Kernel choices an earlier run measured (a resumed checkpoint's), by the key the choosing op writes:
  // they are taken as they are, so a resumed run computes what the run it continues computed.
  const std::unordered_map<std::string, std::string>& kernel_choices() const { return kernel_choices_; }
  void set_kernel_choice(const std::string& key, const std::string& choice) { kernel_choices_[key] = choice; }
  // Whether the optimizer updates each parameter in the backward pass, as soon as the last step that reads
  // the parameter or writes its gradient is done (engine/optim/step_in_backward.h). Its ParamGrad values
  // then live in the arena, from their first writer to that step, instead of in a persistent block: for a
  // batch run in one micro-batch, whose gradients nothing reads after the update.
  bool step_in_backward() const { return step_in_backward_; }
  void set_step_in_backward(bool on) { step_in_backward_ = on; }

 private:
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> params_, states_, inputs_;
  // The first value of each name (find_value): lookups and the duplicate checks of param() and state() in
  // constant time, so building a graph of n layers takes time linear in n.
  std::unordered_map<std::string, ValueId> by_name_;
  ValueId loss_ = -1;
  DType float_dtype_ = DType::F32;
  bool tf32_ = false;
  bool deterministic_ = false;
  ConvAlgo conv_algo_ = ConvAlgo::Direct;
  bool step_in_backward_ = false;
  std::unordered_map<std::string, std::string> kernel_choices_;
};

}  // namespace crumb
