// The memory a training run needs, split the way users reason about it: persistent state (parameters,
// gradients, optimizer state) that does not depend on the batch, and the per-micro-batch part (arena
// of activations, kernel workspace, input staging) that grows with the micro-batch size m. The
// scheduler uses it to pick the largest m that fits a budget.
#pragma once
#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

#include "engine/plan/compile.h"
#include "engine/graph/graph.h"
#include "engine/optim/optimizer.h"
#include "engine/plan/planner.h"

namespace crumb {

struct MemoryBreakdown {
  int micro_batch = 0;
  // The dtype of the arena's floating-point values (activations, their gradients, saved tensors) and that
  // of the persistent blocks: the graph's float and master dtypes (docs/precision.md).
  DType float_dtype = DType::F32, master_dtype = DType::F32;
  std::size_t params = 0, grads = 0, optimizer_state = 0;  // master dtype
  // Mixed precision: the parameter store's 16-bit copies of the parameters (ParamStore::device_copy_block),
  // which the 16-bit ops read; 0 otherwise.
  std::size_t param_copies = 0;
  std::string optimizer;        // what optimizer_state holds, e.g. "adamw: exp_avg + exp_avg_sq"
  std::size_t state = 0;        // non-trained persistent state (running statistics, counters)
  std::size_t activations = 0;  // peak bytes of live values in the training pass
  std::size_t workspace = 0;    // largest kernel scratch of one step of the training pass
  std::size_t arena = 0;        // the arena block (values + workspace): max over training and evaluation
  std::size_t staging = 0;      // device input slots (two micro-batches) on CUDA; none on the CPU
  // Host buffers the data loaders hold (CPU runs only, where the budget is host memory): two micro-batch
  // slots for training (one filling while the other trains) and two for evaluation, whatever the batch
  // size. Set by choose_micro_batch and count_loader for training runs. The data set and its sample order
  // (4 bytes a sample) are outside the budget, like the program.
  std::size_t loader = 0;
  // The gradients live in the arena, each until its parameter's update (Graph::step_in_backward): grads is 0.
  bool grads_in_arena = false;
  std::size_t runtime = 0;      // the device runtime's own persistent buffers (cuBLAS workspace on CUDA)
  // Swapped activations (engine/strategy/swap.h) in pinned host memory: outside a device's budget, so not in
  // total(). On the CPU it stands in for a device's host memory, so the schedule runs and is tested there.
  std::size_t host_pool = 0;
  std::size_t persistent() const { return params + param_copies + grads + optimizer_state + state; }
  std::size_t total() const { return persistent() + arena + staging + runtime + loader; }
};

// The breakdown of a run whose passes were compiled as train and eval (same device and micro-batch).
// opt: the optimizer, whose state blocks (one parameter block each) count as persistent memory. On CUDA
// the kernel workspace is cuDNN's for the algorithms it picked at this micro-batch size.
MemoryBreakdown measure_memory(const Graph& g, const CompiledPass& train, const CompiledPass& eval,
                               const OptimizerConfig& opt);

// A micro-batch size with its breakdown and its compiled passes (for the scheduler to run).
struct MicroBatchPlan {
  int micro_batch = 0;
  MemoryBreakdown memory;
  CompiledPass train, eval;
};
// Compiles both passes of g (which must have its backward graph) for micro-batches of m on device.
MicroBatchPlan plan_micro_batch(const Graph& g, int m, const OptimizerConfig& opt, Device device = Device::CPU,
                                int index = 0);
// batch > 0 also counts the loaders' host buffers for training in batches of that size (count_loader). A graph
// whose optimizer steps in the backward pass is measured with its gradients kept where m < batch (a sweep's
// smaller micro-batches accumulate them).
MemoryBreakdown measure_memory(const Graph& g, int m, const OptimizerConfig& opt, Device device = Device::CPU,
                               int index = 0, int batch = 0);

// The largest m <= batch whose memory total fits in budget bytes, with its compiled passes; each
// candidate is compiled once. With BatchNorm, m is a multiple of its group (micro_batch_multiple) or the
// whole batch. Throws crumb::Error naming the smallest budget that would work when even the smallest
// candidate does not fit.
MicroBatchPlan choose_micro_batch(const Graph& g, int batch, std::size_t budget, const OptimizerConfig& opt,
                                  Device device = Device::CPU, int index = 0);
// The plan's breakdown with the loaders' host buffers counted (CPU runs): training slots of min(m, batch)
// samples, evaluation slots of m.
void count_loader(const Graph& g, int batch, MicroBatchPlan& plan);

// Where the persistent memory of mb alone (parameters, gradients, optimizer state: the same at every
// micro-batch, which no strategy lowers) exceeds budget, a clause for a budget error that says so and names
// the largest parameter ("; the persistent state alone ... 'fc1.weight' [120, 4194304] ..."); else "".
std::string persistent_note(const Graph& g, const MemoryBreakdown& mb, std::size_t budget);

// Throws crumb::Error unless batches of `batch` samples may run in micro-batches of m: every one but the
// last holds whole BatchNorm groups (micro_batch_multiple).
void check_micro_batch(const Graph& g, int m, int batch);

// "1.50 MiB"-style formatting and parsing ("64MiB", "1.5GiB", "500MB", "4096"; K/M/G mean KiB/MiB/GiB).
std::string format_bytes(std::size_t bytes);
std::size_t parse_bytes(const std::string& text);

// The breakdown as --explain prints it, one row per line: label (sub-parts indented by two spaces), bytes,
// the dtype its tensors are stored in (empty where it holds raw bytes or whole samples) and what it holds.
// Rows that are zero for this run (staging on the CPU, the 16-bit copies in float32) are left out.
struct BreakdownRow {
  std::string label;
  std::size_t bytes;
  std::string dtype;
  std::string note;
};
std::vector<BreakdownRow> breakdown_rows(const MemoryBreakdown& mb, std::size_t budget);

// The precision a graph trains in, as train's --precision names it: "fp32", "tf32", "bf16", "fp16" (and
// "fp64" for the float64 graphs of the gradient checks).
const char* precision_of(const Graph& g);
// The dtypes of a node's outputs, each once, in output order: "BF16", "BF16/U8" (a max pool's argmax).
std::string output_dtypes(const Graph& g, const Node& n);

// The report of `train --explain`: the precision and the breakdown, then one line per step with the live
// bytes and the dtypes the step writes.
void write_memory_report(std::ostream& os, const Graph& g, const MemoryBreakdown& mb, const MemoryPlan& train_plan,
                         std::size_t budget);
// The per-step timeline as CSV: step,pass,layer,op,live_bytes,workspace_bytes,dtype.
void write_timeline_csv(std::ostream& os, const Graph& g, const MemoryPlan& train_plan);

}  // namespace crumb
