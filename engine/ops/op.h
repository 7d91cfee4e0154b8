// An op is declared once: shape rule, backward rule, workspace size, in-place permission; and
// implemented per backend as one function per backend and dtype (Caffe's twin methods, without the
// class tower). Nodes point at their OpDef.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/graph.h"
#include "kernels/cpu/shapes.h"

namespace crumb {

class GradBuilder;

// Per-node state a backend builds once per compiled plan (cuDNN descriptors and algorithms).
struct OpState {
  virtual ~OpState() = default;
};

// What one step of the executor sees at run time. Pointers are resolved once at compile time into
// the executor's table; only the batch size n and the write mode change between micro-batches.
struct StepArgs {
  const Graph* graph = nullptr;
  const Node* node = nullptr;
  void* const* ptr = nullptr;  // ValueId -> data
  int n = 0;                   // samples in this micro-batch (<= the compiled micro-batch size)
  bool accumulate = false;     // write mode of the node's gradient outputs (+= when true)
  double loss_scale = 1.0;     // 1/B: the loss of a micro-batch is its sum over samples / B
  void* workspace = nullptr;   // workspace_bytes bytes, 256-byte aligned
  std::size_t workspace_bytes = 0;  // the step's workspace at the compiled micro-batch size (>= at n)
  OpState* state = nullptr;    // the backend's per-node state, if it built one
  // Loss ops add the unscaled sum of their per-sample losses and the number of correctly classified
  // samples here (in the memory of the device that runs the step).
  double* loss_sum = nullptr;
  int64_t* correct = nullptr;

  template <class T> T* out(int i = 0) const { return static_cast<T*>(ptr[node->out[i]]); }
  template <class T> const T* in(int i) const { return static_cast<const T*>(ptr[node->in[i]]); }
  const Value& in_value(int i) const { return graph->value(node->in[i]); }
  const Value& out_value(int i = 0) const { return graph->value(node->out[i]); }
};

using StepFn = void (*)(const StepArgs&);

struct OpDef {
  const char* name;
  // Validates the inputs and sets (or checks) the dims of node.out; throws crumb::Error naming the layer.
  void (*infer)(Graph& g, Node& n);
  // Emits the backward nodes for n given the gradients of its outputs (null: no gradient flows).
  void (*backward)(GradBuilder& gb, const Node& n);
  // Scratch bytes the CPU implementation needs for a micro-batch of n samples (null: none). CUDA
  // implementations size their own (engine/cuda/ops.cc).
  std::size_t (*workspace_bytes)(const Graph& g, const Node& n, int batch);
  // out[0] may take over in[0]'s storage when in[0] is not used afterwards (ReLU, ReLU backward).
  bool inplace;
  // out[0] is a view of in[0]: no computation, no storage of its own (reshape/flatten).
  bool view;
  StepFn cpu_f32;
  StepFn cpu_f64;
};
// The CUDA implementations are not fields here: they live in engine/cuda/ops.cc, keyed by OpDef, so
// that op files (and a CPU-only build) never see CUDA headers.

// Forward ops (what models are built from) and the backward ops their rules emit.
extern const OpDef kLinear, kLinearBwdData, kLinearBwdWeight;
extern const OpDef kConv2d, kConv2dBwdData, kConv2dBwdWeight;
extern const OpDef kMaxPool2d, kMaxPool2dBwd, kAvgPool2d, kAvgPool2dBwd, kGlobalAvgPool, kGlobalAvgPoolBwd;
extern const OpDef kRelu, kReluBwd;
extern const OpDef kReshape;
extern const OpDef kAdd;
extern const OpDef kSoftmaxXent, kSoftmaxXentBwd;

// Helpers shared by the op files.
namespace ops {
// Throws "layer '<name>' (<op>): <message>".
[[noreturn]] void fail(const Node& n, const std::string& message);
// Checks in.size() within [lo, hi] and out.size() == outs.
void expect_arity(const Node& n, size_t lo, size_t hi, size_t outs);
// Sets the dims of out[i] if it is new (empty dims and not yet produced), else checks they match.
void set_out_dims(Graph& g, const Node& n, int i, const Dims& dims);
// Fills the window fields of a conv/pool kernel shape (batch, spatial extent, kernel, stride,
// padding, floor-mode output extent) from per-sample [c, h, w] dims and the node's attributes.
template <class Shape> void set_window(Shape& s, const Dims& x, const Attrs& a, int batch) {
  s.n = batch;
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
// when x needs a gradient, and (dw[, db]) = bwd_weight(dy, x) in the parameters' write mode.
void weighted_backward(GradBuilder& gb, const Node& n, const OpDef& bwd_data, const OpDef& bwd_weight);
// Kernel shapes of a node at `batch` samples, shared by the backends: conv2d and its backward nodes;
// max/avg pooling and their backward nodes; (channels, pixels per channel) of a global average pool.
cpu::Conv2dShape conv2d_shape(const Graph& g, const Node& n, int batch);
cpu::Pool2dShape pool2d_shape(const Graph& g, const Node& n, int batch);
std::pair<int, int> global_pool_dims(const Graph& g, const Node& n);
// Instantiates a templated CPU implementation for both dtypes.
#define CRUMB_CPU_IMPL(fn) fn<float>, fn<double>
}  // namespace ops

}  // namespace crumb
