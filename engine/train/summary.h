// What a finished run was and measured, in one struct: train prints it as the last line on stdout (JSON),
// the Python module returns it, benchmarks compare it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/train/trainer.h"

namespace crumb {

struct RunSummary {
  std::string model, dataset;
  int epochs = 0, batch = 0, micro_batch = 0, threads = 0;
  uint64_t seed = 0;
  double samples_per_s = 0, train_seconds = 0;
  double test_accuracy = 0, test_loss = 0, final_loss = 0;
  long long parameters = 0;
  std::size_t arena_bytes = 0, arena_lower_bound = 0;
  std::string device;
  // CPU runs: the vector instructions of the kernels (cpu::vector_isa), and in bf16 how its layers
  // multiply (cpu::bf16_multiply); empty elsewhere.
  std::string cpu_kernels, cpu_bf16;
  std::string precision;  // fp32 | tf32 | bf16 | fp16 | fp64
  bool tf32 = false, cuda_graphs = false;  // tf32: the device rounded float32 products to TF32
  bool deterministic = false;               // --deterministic
  // fp16: the loss scale at the end and the steps skipped for overflowing gradients.
  double loss_scale = 1;
  long long skipped_steps = 0;
  std::string optimizer, lr_schedule;
  double final_lr = 0;
  std::size_t memory_budget = 0, max_rss_bytes = 0;
  std::string strategy, strategy_used;
  bool step_in_backward = false;  // the optimizer stepped in the backward pass (engine/optim/step_in_backward.h)
  std::size_t swapped = 0, recomputed = 0, host_pool_bytes = 0;
  // One micro-batch's step: predicted by the cost model, the same in memory, and measured.
  double predicted_step_s = 0, in_memory_step_s = 0, measured_step_s = 0;
  // Data parallel runs only (launched by MPI): the gradient sums over the ranks.
  bool data_parallel = false;
  int ranks = 1;
  std::size_t buckets = 0;
  double allreduce_seconds = 0, allreduce_wait_seconds = 0;
};

// The summary of trainer t after fit() returned r.
RunSummary summarize(Trainer& t, const FitResult& r);
// One line of JSON (non-finite numbers as null).
std::string to_json(const RunSummary& s);

}  // namespace crumb
