// Data-parallel gradient sums. The flat gradient block (engine/run/params.h) is cut into buckets, contiguous
// byte ranges of it (views: nothing is copied), in reverse parameter order as PyTorch's
// DistributedDataParallel cuts them, because the backward finishes the last layers' gradients first.
// In a batch's last micro-batch the reducer, as the training executor's observer, starts summing a
// bucket over all ranks as soon as the last step that writes any of its gradients is done, so the sums
// overlap the rest of the backward; earlier micro-batches only accumulate locally. The run's end
// waits for the sums. With the loss scaled by 1/B for the global batch B, every rank then holds the
// gradient of the mean loss over all B samples.
#pragma once
#include <cstddef>
#include <vector>

#include "engine/dist/communicator.h"
#include "engine/run/params.h"
#include "engine/run/step_observer.h"

namespace crumb {

struct GradBucket {
  std::size_t offset = 0, bytes = 0;  // the byte range of the gradient block it covers (padding included)
  int first = 0, end = 0;             // its parameters: ParamStore::params()[first, end)
};

// PyTorch DDP's sizes (bucket_cap_mb): walking the parameters from the last, a bucket closes once it
// holds at least its cap, first_cap_bytes for the first (so the first sum starts early) and cap_bytes
// after; the last bucket (the first layers) takes what is left. Together they cover the block exactly.
std::vector<GradBucket> plan_buckets(const ParamStore& params, std::size_t cap_bytes, std::size_t first_cap_bytes);

class GradientReducer final : public StepObserver {
 public:
  // Sums params' gradients over comm's ranks in `buckets`, each once the steps in `order` (the training
  // plan's, MemoryPlan::order) that write its gradients have all run.
  GradientReducer(Communicator& comm, ParamStore& params, const std::vector<NodeId>& order,
                  std::vector<GradBucket> buckets);

  void after_step(const Node& n) override;
  void after_run() override;
  // For a rank whose share of a batch is empty: zeroes its gradients and sums them with the others'.
  void sum_zero();

  Communicator& communicator() const { return comm_; }
  const std::vector<GradBucket>& buckets() const { return buckets_; }

  // Where the sums' time went, over all batches so far (CPU; on CUDA these are enqueue times). span:
  // from the first bucket's start to the moment all sums were seen complete; waited: the part of it
  // the rank spent waiting at the end of the backward. span - waited was hidden behind the backward.
  struct Timing {
    double span_seconds = 0, waited_seconds = 0;
    long long batches = 0;
  };
  const Timing& timing() const { return timing_; }

 private:
  void start(std::size_t b);

  Communicator& comm_;
  ParamStore& params_;
  std::vector<GradBucket> buckets_;
  std::vector<int> bucket_of_;  // per value: the bucket of a ParamGrad value, -1 for others
  std::vector<int> writers_;    // per bucket: steps of the plan that write its gradients
  std::vector<int> pending_;    // per bucket: of those, the ones still to run in this batch
  std::size_t next_ = 0;        // buckets [0, next_) have started this batch: every rank starts them in index order
  double first_start_ = -1, all_done_ = -1;  // this batch's times (seconds on a steady clock)
  Timing timing_;
};

}  // namespace crumb
