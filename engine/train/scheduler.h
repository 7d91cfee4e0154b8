// The scheduler splits a batch of B samples into micro-batches of m (the last one ragged), runs
// forward + backward on each with the loss scaled by 1/B, and leaves in the parameter gradients the
// gradient of the mean loss over all B samples: the first micro-batch writes them, the others add.
// It takes the inputs one micro-batch at a time from a MicroBatchSource (engine/data/micro_batches.h): the
// loader assembles them as they are asked for, so no whole batch is ever held in memory. On CUDA each
// micro-batch's inputs are copied to the device while the previous one computes (engine/device/staging.h),
// and a batch returns once its work has finished (its loss is read back).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/run/executor.h"
#include "engine/dist/grad_reducer.h"
#include "engine/dist/moments_merge.h"
#include "engine/device/staging.h"
#include "engine/data/micro_batches.h"

namespace crumb {

struct BatchResult {
  double loss_sum = 0.0;  // summed per-sample loss over the batch (divide by B for the mean)
  int64_t correct = 0;
  int micro_batches = 0;
};

class Scheduler {
 public:
  // Runs the training and evaluation passes compiled for the arena's device (the budget search's, so
  // nothing is compiled twice), reserving the arena once for the larger.
  Scheduler(const Graph& g, ParamStore& params, Arena& arena, CompiledPass train, CompiledPass eval);
  // Compiles both passes for micro-batches of `micro_batch` samples.
  Scheduler(const Graph& g, ParamStore& params, Arena& arena, int micro_batch);
  ~Scheduler();

  // Trains a batch of `batch` samples whose inputs come from `inputs`, every graph input by name (an
  // unknown or missing one is an error). Leaves gradients for an optimizer step. random_key is the batch's
  // key for random ops (random_key(seed, step), engine/graph/rng.h): each micro-batch runs with it and the
  // index of its first sample, so dropout's masks, like every gradient, do not depend on the micro-batch size.
  // loss_scale (fp16's, engine/optim/loss_scaler.h) multiplies every micro-batch's loss alike, so the
  // gradients come out loss_scale times the batch's.
  BatchResult train_batch(MicroBatchSource& inputs, int batch, uint64_t random_key = 0, double loss_scale = 1);
  // The same, from whole-batch arrays in host memory.
  BatchResult train_batch(InputBatches inputs, int batch, uint64_t random_key = 0, double loss_scale = 1);
  // Data-parallel training (null: one process). Each rank then trains its share of every batch
  // (engine/dist/batch_share.h: a source is asked for the share only; InputBatches hold the whole batch, in
  // the same order on every rank) with the loss scaled by 1/B for the whole batch, and the reducer sums the gradients over the ranks during
  // the last micro-batch's backward. BatchResult totals are this rank's.
  // BatchNorm's deferred running statistics are merged over the ranks before they are committed
  // (engine/dist/moments_merge.h), so they too are those of the whole batch.
  void set_data_parallel(GradientReducer* reducer);

  // Forward only over `batch` samples, in chunks of the evaluation plan's size. `after` (if set) is told
  // each chunk's first sample and size once it has run, while the evaluation executor's values hold it
  // (eval_executor().data): how predictions are read out.
  using AfterChunk = std::function<void(int first, int n)>;
  BatchResult evaluate(MicroBatchSource& inputs, int batch, const AfterChunk& after = {});
  BatchResult evaluate(InputBatches inputs, int batch);

  // Replay recorded runs (CUDA graphs) or run every step from the host; on by default (Executor::run).
  void set_recording(bool on) {
    train_.set_recording(on);
    eval_.set_recording(on);
  }

  // Told each step of the training runs' last micro-batches (the optimizer stepping in the backward pass,
  // engine/optim/step_in_backward.h, which never runs data-parallel: the reducer is told there).
  void set_train_observer(StepObserver* observer) { train_.set_observer(observer); }

  int micro_batch() const { return train_.max_batch(); }
  const Executor& train_executor() const { return train_; }
  const Executor& eval_executor() const { return eval_; }

 private:
  class Slices;
  // Binds the source's inputs to the graph's by name (position_, source_bytes_).
  void bind(const MicroBatchSource& inputs);
  template <class Fn>
  // Runs samples [first, first + batch) of the inputs.
  BatchResult for_each_micro_batch(Executor& e, MicroBatchSource& inputs, int first, int batch, Fn&& run);

  const Graph& g_;
  std::vector<ValueId> inputs_;             // the graph's inputs, in its order
  std::vector<std::size_t> sample_bytes_;   // per input: bytes of one sample
  std::vector<std::size_t> position_;       // per input: its place in the source's inputs
  std::vector<std::size_t> source_bytes_;   // per source input: bytes of one sample
  std::unique_ptr<Slices> slices_;          // InputBatches as a source
  Executor train_, eval_;
  std::unique_ptr<InputStaging> staging_;  // devices other than the CPU
  GradientReducer* reducer_ = nullptr;
  std::unique_ptr<MomentsMerge> moments_;  // data-parallel runs
  int share_group_ = 1;                    // data-parallel runs: the samples a share holds whole (batch_share)
};

}  // namespace crumb
