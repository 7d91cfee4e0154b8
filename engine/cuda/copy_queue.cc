// Swap copies on the copy stream (engine/device/copy_queue.h), ordered against the compute stream by events, so
// the copies of a run overlap its kernels and a recorded run (a CUDA graph) captures them as a fork and
// join of the two streams.
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "engine/base/error.h"
#include "kernels/cuda/check.h"

namespace crumb::cuda {
namespace {

class CudaCopyQueue final : public CopyQueue {
 public:
  CudaCopyQueue(const CudaBackend& backend, int tickets)
      : compute_(backend.compute()), copy_(backend.copy()), ready_(tickets, nullptr), done_(tickets, nullptr) {
    for (int t = 0; t < tickets; ++t) {
      // Timing off: these events only order streams.
      CRUMB_CUDA_CHECK(cudaEventCreateWithFlags(&ready_[t], cudaEventDisableTiming));
      CRUMB_CUDA_CHECK(cudaEventCreateWithFlags(&done_[t], cudaEventDisableTiming));
    }
  }
  ~CudaCopyQueue() override {
    // No copy may outlive the memory it reads or writes; a replayed recording's copies are on compute_.
    cudaStreamSynchronize(copy_);
    cudaStreamSynchronize(compute_);
    for (const std::vector<cudaEvent_t>* events : {&ready_, &done_})
      for (cudaEvent_t e : *events)
        if (e) cudaEventDestroy(e);
  }
  CudaCopyQueue(const CudaCopyQueue&) = delete;
  CudaCopyQueue& operator=(const CudaCopyQueue&) = delete;

  void start(int ticket, void* dst, const void* src, std::size_t bytes) override {
    check(ticket);
    CRUMB_CUDA_CHECK(cudaEventRecord(ready_[ticket], compute_));
    CRUMB_CUDA_CHECK(cudaStreamWaitEvent(copy_, ready_[ticket], 0));
    CRUMB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, copy_));
    CRUMB_CUDA_CHECK(cudaEventRecord(done_[ticket], copy_));
  }
  void wait(int ticket) override {
    check(ticket);
    CRUMB_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_[ticket], 0));
  }

 private:
  void check(int ticket) const {
    CRUMB_CHECK(ticket >= 0 && static_cast<std::size_t>(ticket) < done_.size(), "copy queue: ticket ", ticket,
                " is out of range");
  }
  cudaStream_t compute_, copy_;
  std::vector<cudaEvent_t> ready_, done_;
};

}  // namespace

std::unique_ptr<CopyQueue> CudaBackend::make_copy_queue(int tickets) {
  activate();
  return std::make_unique<CudaCopyQueue>(*this, tickets);
}

}  // namespace crumb::cuda
