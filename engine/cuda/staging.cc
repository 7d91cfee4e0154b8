// Double-buffered input staging on the copy stream (engine/device/staging.h), ordered against the compute
// stream by events.
#include <algorithm>
#include <vector>

#include "engine/cuda/cuda_backend.h"
#include "engine/base/error.h"
#include "engine/base/align.h"
#include "kernels/cuda/check.h"

namespace crumb::cuda {
namespace {

class CudaStaging final : public InputStaging {
 public:
  CudaStaging(const CudaBackend& backend, const std::vector<std::size_t>& part_bytes)
      : compute_(backend.compute()), copy_(backend.copy()), part_bytes_(part_bytes) {
    std::size_t total = 0;
    for (std::size_t bytes : part_bytes) {
      offset_.push_back(total);
      total += align_up(bytes);
    }
    for (Buffer& slot : slots_) slot = Buffer(std::max<std::size_t>(total, 1), Memory::Cuda, backend.index());
    for (int s = 0; s < 2; ++s) {
      // Timing off: these events only order streams.
      CRUMB_CUDA_CHECK(cudaEventCreateWithFlags(&copied_[s], cudaEventDisableTiming));
      CRUMB_CUDA_CHECK(cudaEventCreateWithFlags(&released_[s], cudaEventDisableTiming));
    }
  }
  ~CudaStaging() override {
    for (cudaEvent_t e : {copied_[0], copied_[1], released_[0], released_[1]})
      if (e) cudaEventDestroy(e);
  }
  CudaStaging(const CudaStaging&) = delete;
  CudaStaging& operator=(const CudaStaging&) = delete;

  void copy_in(int i, std::size_t k, const void* src, std::size_t bytes) override {
    CRUMB_CHECK(i >= 0 && k < part_bytes_.size() && bytes <= part_bytes_[k], "input staging: micro-batch ", i,
                " input ", k, " of ", bytes, " bytes does not fit its slot");
    // Before a slot's first copy of this micro-batch, wait until the compute that last read it is done (a
    // wait on an event never recorded returns at once: the slot's first use).
    if (k == 0) CRUMB_CUDA_CHECK(cudaStreamWaitEvent(copy_, released_[i % 2], 0));
    CRUMB_CUDA_CHECK(cudaMemcpyAsync(slots_[i % 2].data() + offset_[k], src, bytes, cudaMemcpyHostToDevice, copy_));
  }
  void copied(int i) override { CRUMB_CUDA_CHECK(cudaEventRecord(copied_[i % 2], copy_)); }
  void wait_copied(int i) override { CRUMB_CUDA_CHECK(cudaEventSynchronize(copied_[i % 2])); }
  void await(int i) override { CRUMB_CUDA_CHECK(cudaStreamWaitEvent(compute_, copied_[i % 2], 0)); }
  const void* slot(int i, std::size_t k) const override { return slots_[i % 2].data() + offset_[k]; }
  void release(int i) override { CRUMB_CUDA_CHECK(cudaEventRecord(released_[i % 2], compute_)); }

 private:
  cudaStream_t compute_, copy_;
  std::vector<std::size_t> part_bytes_, offset_;
  Buffer slots_[2];
  cudaEvent_t copied_[2] = {nullptr, nullptr};    // recorded on the copy stream after a slot's copies
  cudaEvent_t released_[2] = {nullptr, nullptr};  // recorded on the compute stream after a slot's last read
};

}  // namespace

std::unique_ptr<InputStaging> CudaBackend::make_staging(const std::vector<std::size_t>& part_bytes) {
  activate();  // its events belong to the current device
  return std::make_unique<CudaStaging>(*this, part_bytes);
}

}  // namespace crumb::cuda
