#include "engine/staging.h"

#include <algorithm>

#include "engine/error.h"
#include "engine/planner.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/context.h"
#include "kernels/cuda/check.h"
#endif

namespace crumb {

#if CRUMB_HAVE_CUDA
struct InputStaging::Events {
  cudaEvent_t copied[2] = {nullptr, nullptr};    // recorded on the copy stream after a slot's copy
  cudaEvent_t released[2] = {nullptr, nullptr};  // recorded on the compute stream after a slot's last read
  ~Events() {
    for (cudaEvent_t e : {copied[0], copied[1], released[0], released[1]})
      if (e) cudaEventDestroy(e);
  }
};
#else
struct InputStaging::Events {};
#endif

InputStaging::InputStaging(const std::vector<std::size_t>& part_bytes) : part_bytes_(part_bytes) {
  std::size_t total = 0;
  for (std::size_t bytes : part_bytes) {
    offset_.push_back(total);
    total += align_up(bytes);
  }
#if CRUMB_HAVE_CUDA
  for (Buffer& slot : slots_) slot = Buffer(std::max<std::size_t>(total, 1), Memory::Cuda);
  events_ = std::make_unique<Events>();
  for (int s = 0; s < 2; ++s) {
    // Timing off: these events only order streams.
    CRUMB_CUDA_CHECK(cudaEventCreateWithFlags(&events_->copied[s], cudaEventDisableTiming));
    CRUMB_CUDA_CHECK(cudaEventCreateWithFlags(&events_->released[s], cudaEventDisableTiming));
  }
#else
  CRUMB_FAIL("this build of Crumb has no CUDA backend, so it has no device input staging; use --device cpu");
#endif
}

InputStaging::~InputStaging() = default;

void InputStaging::copy_in(int i, std::size_t k, const void* src, std::size_t bytes) {
  CRUMB_CHECK(i >= 0 && k < part_bytes_.size() && bytes <= part_bytes_[k], "input staging: micro-batch ", i,
              " input ", k, " of ", bytes, " bytes does not fit its slot");
#if CRUMB_HAVE_CUDA
  const cudaStream_t copy = cuda::Context::get().copy();
  // Before a slot's first copy of this micro-batch, wait until the compute that last read it is done (a
  // wait on an event never recorded returns at once: the slot's first use).
  if (k == 0) CRUMB_CUDA_CHECK(cudaStreamWaitEvent(copy, events_->released[i % 2], 0));
  CRUMB_CUDA_CHECK(
      cudaMemcpyAsync(slots_[i % 2].data() + offset_[k], src, bytes, cudaMemcpyHostToDevice, copy));
#else
  (void)src;
#endif
}

void InputStaging::copied(int i) {
#if CRUMB_HAVE_CUDA
  CRUMB_CUDA_CHECK(cudaEventRecord(events_->copied[i % 2], cuda::Context::get().copy()));
#else
  (void)i;
#endif
}

void InputStaging::await(int i) {
#if CRUMB_HAVE_CUDA
  CRUMB_CUDA_CHECK(cudaStreamWaitEvent(cuda::Context::get().compute(), events_->copied[i % 2], 0));
#else
  (void)i;
#endif
}

void InputStaging::release(int i) {
#if CRUMB_HAVE_CUDA
  CRUMB_CUDA_CHECK(cudaEventRecord(events_->released[i % 2], cuda::Context::get().compute()));
#else
  (void)i;
#endif
}

}  // namespace crumb
