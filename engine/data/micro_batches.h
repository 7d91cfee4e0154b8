// Where the scheduler (engine/train/scheduler.h) takes a batch's graph inputs from: one micro-batch at a
// time, in order, so the host needs room for two micro-batches rather than a whole batch. The loader
// (engine/data/loader.h) assembles them as they are asked for; whole-batch arrays already in memory
// (InputBatches) are sliced.
#pragma once
#include <cstddef>
#include <initializer_list>

namespace crumb {

// One graph input's data for a whole batch: `batch` samples of the input's per-sample size, contiguous,
// in host memory (pinned for copies to overlap on CUDA), bound by the input's name in the graph.
struct InputBatch {
  const char* name;
  const void* data;
};

// A batch's inputs, as written at a call site ({{"x", images}, {"y", labels}}). An initializer_list
// parameter keeps its array alive for the whole call, and copying one does not copy the array.
using InputBatches = std::initializer_list<InputBatch>;

class MicroBatchSource {
 public:
  virtual ~MicroBatchSource() = default;
  // The inputs it supplies, bound by name to the graph's (every graph input exactly once).
  virtual std::size_t inputs() const = 0;
  virtual const char* name(std::size_t j) const = 0;
  // The bytes of one sample of input j, where the source knows them (the loader: float32 or float64
  // images), checked against the graph input's; 0 where it does not (whole-batch arrays).
  virtual std::size_t sample_bytes(std::size_t /*j*/) const { return 0; }
  // The scheduler is about to take samples [first, first + count) of the current batch in micro-batches
  // of m (the last one short), in order.
  virtual void start(int first, int count, int m) = 0;
  // The next micro-batch: the host address of input j's first sample at [j]. Valid until next() or
  // start() is called again, so a copy out of it must be done (not only enqueued) before that.
  virtual const void* const* next() = 0;
};

}  // namespace crumb
