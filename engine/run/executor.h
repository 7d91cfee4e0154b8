// The executor turns a compiled pass (engine/plan/compile.h: implementations + memory plan) into a flat list
// of steps whose pointers are resolved once, at construction (arena offsets, parameter blocks; inputs
// are bound per run). Running it never allocates. One executor per (graph, micro-batch size, pass,
// device); a smaller final micro-batch reuses it. The graph must not change after an executor is
// compiled from it (steps point at its nodes), and the arena must already be, or be allowed to grow
// to, the plan's size: executors sharing an arena reserve the largest first (the scheduler does).
// The device is the arena's: on CUDA, run() enqueues the steps on the compute stream and returns at
// once; results() is where the host waits.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/device/arena.h"
#include "engine/device/backend.h"
#include "engine/plan/compile.h"
#include "engine/graph/graph.h"
#include "engine/graph/op.h"
#include "engine/run/params.h"
#include "engine/plan/planner.h"
#include "engine/run/step_observer.h"

namespace crumb {

class Executor {
 public:
  // params, arena and the compiled pass must be on the same device.
  Executor(const Graph& g, ParamStore& params, Arena& arena, CompiledPass compiled);
  // Compiles the pass itself, for the arena's device.
  Executor(const Graph& g, ParamStore& params, Arena& arena, int max_batch, Pass pass);
  ~Executor();

  // Points an Input value at caller-owned data in the device's memory for the next run (n samples of
  // it are read).
  void bind(ValueId input, const void* data);
  // Runs all steps on n samples (1 <= n <= max_batch). first_micro_batch starts a batch: parameter
  // gradients are written and the results zeroed (true), or gradients and results accumulate (false).
  // loss_scale is 1/B for a batch of B samples. Errors name the layer, its op and its input shapes.
  // On a device that can record (CUDA), the first run of each (n, first, last, loss_scale, input
  // addresses) is recorded and every run of it replays the recording: one launch instead of one per
  // kernel. The plan never changes between runs, so a replay does exactly what the steps would.
  // last_micro_batch ends the batch: ops that keep per-batch totals (BatchNorm's deferred running
  // statistics) commit them in this run. `random` is what random ops (dropout) draw from: the batch's
  // key and the index of this micro-batch's first sample in the batch. It lives in device memory, not in
  // the recording, so replays of one recording may run with different keys.
  void run(int n, bool first_micro_batch, bool last_micro_batch, double loss_scale, RandomKey random = {});
  // Runs all steps once on n samples as the first and last micro-batch of a batch, waiting for each, and
  // returns each plan step's seconds (0 for views): the measured kernel times of a cost model
  // (engine/strategy/cost_model.h). Gradients, metrics and running statistics change as in a run.
  std::vector<double> time_steps(int n, RandomKey random = {});
  // Data-parallel training: the batch's last micro-batch leaves its per-batch totals (BatchNorm's moments)
  // uncommitted; the caller merges them over the ranks in place (batch_totals) and then commits them.
  void set_deferred_commit(bool on) { commit_ = !on; }
  // The per-batch totals of the steps that commit them, in the device's memory: BatchNorm's moments,
  // [3][c] doubles (count, mean, M2 per channel), as the last run left them.
  struct BatchTotal {
    double* data;
    int channels;
  };
  std::vector<BatchTotal> batch_totals() const;
  // Commits the totals (the running statistics' momentum update), in order with the work enqueued.
  void commit_totals();
  // Recording on (the default) or off; off runs every step from the host each time.
  void set_recording(bool on);
  // Whether runs are replayed from recordings: on, on a device that records, and no capture has failed.
  bool recording() const { return record_ && backend_.can_record(); }
  // Told each step of a batch's last micro-batch (null: none). Those runs are never recorded: the
  // observer's host-side work (polling, timing) must run every time.
  void set_observer(StepObserver* observer) { observer_ = observer; }

  // The loss op's metric outputs: the unscaled loss summed over the samples of the batch's runs so far,
  // and how many of them were classified correctly. Waits for those runs to finish.
  struct Results {
    double loss_sum = 0.0;
    int64_t correct = 0;
  };
  Results results();
  // Data of any value during/after the last run (views included), in the device's memory.
  const void* data(ValueId v) const { return ptr_.at(v); }
  Device device() const { return arena_.device(); }
  int index() const { return arena_.index(); }

  const MemoryPlan& plan() const { return compiled_.plan; }
  int max_batch() const { return compiled_.max_batch; }
  // Arena bytes this executor needs (activations and kernel workspace).
  std::size_t arena_bytes() const { return compiled_.plan.arena_bytes; }

 private:
  struct Step {
    int position;  // in the plan's order
    const Node* node;
    StepFn fn;
    StepFn commit;   // commits per-batch totals (null: none)
    OpState* state;  // owned by compiled_
    char* workspace;  // in the arena, null if the step needs none
    std::size_t workspace_bytes;
  };
  void resolve();
  // The arguments every step of this executor runs with (the rest is per run and per step).
  StepArgs step_args() const;
  // What every run does first: checks n and the bound inputs, points input views, writes the random key.
  void prepare_run(int n, RandomKey random);
  // seconds (null: not timed) receives each plan step's time, each step waited for.
  void enqueue(int n, bool first_micro_batch, bool last_micro_batch, double loss_scale,
               std::vector<double>* seconds = nullptr);
  [[noreturn]] void fail_in(const Step& s, int n, const char* what) const;

  const Graph& g_;
  ParamStore& params_;
  Arena& arena_;
  Backend& backend_;
  CompiledPass compiled_;
  std::vector<Step> steps_;
  std::vector<void*> ptr_;
  std::vector<const void*> bound_;       // per value: bound input data
  std::vector<ValueId> input_views_;     // views whose storage is an Input (re-pointed per run)
  // Recorded runs, by what a run's recorded work depends on besides the plan.
  struct Recorded {
    int n;
    bool first, last;
    double loss_scale;
    std::vector<const void*> inputs;  // bound address of each graph input
    std::unique_ptr<Recording> recording;
  };
  std::vector<Recorded> recorded_;
  bool record_ = true;
  bool commit_ = true;  // last micro-batches commit per-batch totals (false: commit_totals does)
  StepObserver* observer_ = nullptr;
  // Every Metric value of the graph, in the device's memory, zeroed by a batch's first run; the loss op's
  // come first, so results() reads back only those bytes.
  Buffer metrics_;
  std::size_t loss_metric_bytes_ = 0;
  Buffer host_pool_;  // the plan's host-pool space (in the backend's host_memory()), if it placed anything there
  Buffer readback_;  // metrics_ copied back to the host (in host_memory())
  Buffer random_;    // the run's RandomKey in the device's memory, if a step reads one
  std::unique_ptr<CopyQueue> copies_;  // the swap schedule's copies, if the plan has one (after host_pool_:
                                       // destroyed first, so no copy outlives the memory it touches)
  std::vector<ValueId> metric_values_;
  ValueId loss_sum_ = -1, correct_ = -1;  // the loss node's metric outputs (correct may be absent)
};

}  // namespace crumb
