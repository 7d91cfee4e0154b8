// The op test cases: each family's case file (tests/ops/<family>_cases.cc) adds its cases when the program
// loads (CRUMB_ON_LOAD, engine/base/registry.h), so a new case or a new family edits no list here. Every
// case runs in every mode, on every backend:
// - OpGradCheck (tests/gradcheck_test.cc): float64 gradients against central finite differences, and
//   bf16 and f16 runs (16-bit activations, float32 parameters and gradients) against float64 on the
//   same values;
// - OpParity (tests/ops_test.cc): the CPU against CUDA, in float32, bf16 and f16;
// - OpAccumulate (tests/ops_test.cc): gradient buffers full of garbage are overwritten by a batch's
//   first micro-batch and added to exactly by the next, on the CPU and on CUDA, in float32, bf16 and f16.
// A case builds only the ops under test; op_graph() puts the same graph around every body, so each mode
// runs the op through the real autograd, planner and executor. The registry knows no test framework
// (the checks are the test files'), so benchmarks can link it too (the CMake object library
// crumb_op_cases).
#pragma once
#include <functional>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/strategy/swap.h"

namespace crumb::test {

struct OpCase {
  const char* name;  // the test's name in every mode
  Dims x_dims;       // per-sample dims of the input x
  int batch;
  // Builds the ops under test on x; returns their output (op_graph flattens it if it is not 1-D).
  std::function<ValueId(Graph&, ValueId)> body;
  // A memory-strategy rewrite applied after autograd (swap, recompute), if any: their ops run in every
  // mode. Throws crumb::Error when it did not rewrite what the case is about.
  std::function<void(Graph&)> rewrite = nullptr;
};

// Adds cases to the registry; a name already there is an error.
void add_op_cases(const std::vector<OpCase>& cases);
// Every registered case, in the order the case files loaded.
const std::vector<OpCase>& op_cases();

// input x (requires_grad) -> body -> flatten (if not 1-D) -> softmax cross-entropy against labels y, in
// the float dtype (F64 for gradient checks, F32 to compare devices, BF16 or F16 for mixed precision: its
// x is then a float32 input cast to 16-bit), with its backward graph.
Graph op_graph(const OpCase& c, DType dtype);

// Every saved value that can be recomputed without keeping another value longer or running a convolution
// or a linear layer again (recomputing those too recomputes whole chains: tests/swap_recompute_test.cc).
std::vector<ValueId> all_recomputable(const Graph& g);
std::vector<ValueId> all_saved(const Graph& g);
// conv (3 channels, 3x3) -> BatchNorm normalising with non-trivial running statistics (mean 0.3, var 2.5):
// PyTorch's eval() layer, differentiated (the frozen cases).
ValueId frozen_conv_bn(Graph& g, ValueId x);
// Swap settings for tests: a node and a copy take one unit of time each; `window` bytes may be prefetched.
SwapTiming swap_window(std::size_t window);

}  // namespace crumb::test
