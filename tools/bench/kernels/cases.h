// What the kernel benchmarks run: the engine's own op rows, one Case per distinct node of a reference
// model's training graph (forward and backward, after autograd), read off the model's real graph so the
// shapes are the engine's own and cannot drift from the models; the optimizer's passes over the
// parameter block; and a few of DeepBench's training-set shapes as graphs of one layer. Shared by the
// CPU and CUDA benchmarks, which also share the work model (flops / bytes) below.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"

namespace crumb {
class Backend;
struct OptimizerKernels;
}  // namespace crumb

namespace crumb::bench {

// The value of element i of every benchmark operand: in [-0.5, 0.5), deterministic, so no kernel meets
// NaN, infinity or denormals and every run does the same work.
inline float operand_value(std::size_t i) { return static_cast<float>((i * 7919 % 1000) / 1000.0 - 0.5); }

// One of the optimizer's per-batch passes over the flat parameter block (engine/optim/optimizer.h).
struct OptimizerPass {
  const char* name;
  int arrays;   // float arrays of the block's size it takes (parameters, gradients, state), each read once
  int written;  // how many of them it writes back
  // One pass over `count` elements; `nonfinite` is 8 bytes of the device's memory for the count.
  void (*run)(const OptimizerKernels& k, Backend& b, float* const* arrays, std::size_t count, uint64_t* nonfinite);
};

struct Case {
  std::string suite;  // the model and its input ("resnet50_224"), "deepbench" or "op_cases"
  std::string op;     // the node's op (OpDef::name), or the optimizer pass
  std::string layer;  // the first node of the suite with this shape (its graph name), or "parameters"
  std::string label;  // the shape in words: the node's values at the batch, and its window
  int batch = 0;
  int layers = 1;     // runs of this exact op and shape in one training step of the suite
  // The work of one run: FLOPs for GEMM-like ops (OpDef::flops), judged against the GEMM ceiling;
  // otherwise the bytes of every value it reads or writes, once, judged against the bandwidth ceiling.
  // Ops that take several passes over a value move more, so their % of bandwidth stays below 100.
  bool compute_bound = false;
  double flops = 0, bytes = 0;
  // What runs: node `node` of `graph`, or the optimizer pass `pass` over `count` parameters.
  std::shared_ptr<const Graph> graph;
  NodeId node = -1;
  const OptimizerPass* pass = nullptr;
  int64_t count = 0;

  // The benchmark's name: op/suite/layer.
  std::string name() const { return op + "/" + suite + "/" + layer; }
};

struct Suite {
  std::string name;   // as in Case::suite
  std::string model;  // the model it builds (registry name; empty for DeepBench)
  int channels, height, width, classes, batch;
  DType dtype = DType::F32;  // the model's activations (bf16: the rows --precision bf16 runs)
};
// The suites in run order: lenet5, cnn, resnet20 (at 28x28 also in bf16), resnet50 at 224x224, vgg11_bn at 32x32 and 224x224,
// deepbench, and op_cases (the engine's op test cases, tests/ops/registry.h).
const std::vector<Suite>& suites();

// The distinct nodes of one training step of a suite, in graph order, then the optimizer's passes.
std::vector<Case> cases(const Suite& suite);

// One run of a case on one backend, with operands of its own in the backend's memory: every value the
// node reads or writes at the case's batch (inputs filled with operand_value, integers and outputs zero;
// a non-float input another node computes, such as max pooling's argmax, comes from running that node
// once), the row's per-node state and workspace, and a dropout key. A ReLU mask's output shares its
// input's storage, as the engine runs it (masks_in_place, cases.cc).
class EngineCall {
 public:
  EngineCall(const Case& c, Backend& b);
  ~EngineCall();
  EngineCall(const EngineCall&) = delete;
  EngineCall& operator=(const EngineCall&) = delete;
  // Enqueues one run (on CUDA, on the backend's compute stream).
  void run();
  std::size_t workspace_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crumb::bench
