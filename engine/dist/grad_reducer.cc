#include "engine/dist/grad_reducer.h"

#include <algorithm>
#include <chrono>

#include "engine/device/backend.h"
#include "engine/base/error.h"

namespace crumb {
namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

std::vector<GradBucket> plan_buckets(const ParamStore& params, std::size_t cap_bytes, std::size_t first_cap_bytes) {
  CRUMB_CHECK(cap_bytes > 0 && first_cap_bytes > 0, "gradient buckets need a cap of at least 1 byte");
  const std::vector<ValueId>& ps = params.params();
  std::vector<GradBucket> buckets;
  // Walking down from the block's end, each bucket ends where the previous one began.
  std::size_t end_byte = params.bytes();
  int end = static_cast<int>(ps.size());
  for (int i = end - 1; i >= 0; --i) {
    const std::size_t begin_byte = params.byte_offset(ps[i]);
    if (i > 0 && end_byte - begin_byte < (buckets.empty() ? first_cap_bytes : cap_bytes)) continue;
    buckets.push_back({begin_byte, end_byte - begin_byte, i, end});
    end_byte = begin_byte;
    end = i;
  }
  return buckets;
}

GradientReducer::GradientReducer(Communicator& comm, ParamStore& params, const std::vector<NodeId>& order,
                                 std::vector<GradBucket> buckets)
    : comm_(comm), params_(params), buckets_(std::move(buckets)) {
  const Graph& g = params.graph();
  bucket_of_.assign(g.num_values(), -1);
  for (std::size_t b = 0; b < buckets_.size(); ++b)
    for (int i = buckets_[b].first; i < buckets_[b].end; ++i)
      if (g.value(params.params()[i]).grad >= 0) bucket_of_[g.value(params.params()[i]).grad] = static_cast<int>(b);
  writers_.assign(buckets_.size(), 0);
  for (NodeId id : order)
    for (ValueId v : g.node(id).out)
      if (bucket_of_[v] >= 0) ++writers_[bucket_of_[v]];
  pending_ = writers_;
}

void GradientReducer::start(std::size_t b) {
  if (first_start_ < 0) first_start_ = now_seconds();
  char* block = static_cast<char*>(params_.device_grad_block());
  comm_.start_sum(block + buckets_[b].offset, buckets_[b].bytes / dtype_size(params_.dtype()), params_.dtype());
}

void GradientReducer::after_step(const Node& n) {
  for (ValueId v : n.out)
    if (bucket_of_[v] >= 0) --pending_[bucket_of_[v]];
  // Collectives are matched by their order: start buckets in index order on every rank (a rank with an
  // empty share starts them all in that order), each once it and all before it are final.
  while (next_ < buckets_.size() && pending_[next_] == 0) start(next_++);
  // MPI advances a non-blocking sum only inside its calls: one poll per step keeps the sums moving.
  if (first_start_ >= 0 && all_done_ < 0 && comm_.poll_sums()) all_done_ = now_seconds();
}

void GradientReducer::after_run() {
  // Buckets no step writes (parameters without gradients) hold zeros; every rank sums them all the same.
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    CRUMB_CHECK(b < next_ || pending_[b] == 0, "gradient bucket ", b, " was never summed: ", pending_[b], " of its ",
                writers_[b], " writers did not run in the batch's last micro-batch");
  }
  while (next_ < buckets_.size()) start(next_++);
  const double wait_start = now_seconds();
  comm_.finish_sums();
  const double end = now_seconds();
  timing_.span_seconds += (all_done_ >= 0 ? all_done_ : end) - first_start_;
  timing_.waited_seconds += end - wait_start;
  ++timing_.batches;
  pending_ = writers_;
  next_ = 0;
  first_start_ = all_done_ = -1;
}

void GradientReducer::sum_zero() {
  Backend& b = backend(params_.device(), params_.index());
  b.activate();
  b.zero(params_.device_grad_block(), params_.bytes());
  std::fill(pending_.begin(), pending_.end(), 0);
  after_run();
}

}  // namespace crumb
