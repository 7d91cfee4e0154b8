#include "engine/staging.h"

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

InputStaging::InputStaging(std::size_t x_bytes, std::size_t y_bytes) : x_bytes_(x_bytes), y_bytes_(y_bytes) {
#if CRUMB_HAVE_CUDA
  for (Buffer& slot : slots_) slot = Buffer(align_up(x_bytes) + align_up(y_bytes), Memory::Cuda);
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

void InputStaging::copy_in(int i, const void* x, std::size_t x_bytes, const void* y, std::size_t y_bytes) {
  CRUMB_CHECK(i >= 0 && x_bytes <= x_bytes_ && y_bytes <= y_bytes_, "input staging: micro-batch ", i, " of ", x_bytes,
              " + ", y_bytes, " bytes does not fit slots of ", x_bytes_, " + ", y_bytes_);
#if CRUMB_HAVE_CUDA
  const int s = i % 2;
  const cudaStream_t copy = cuda::Context::get().copy();
  // A wait on an event never recorded returns at once (the slot's first use).
  CRUMB_CUDA_CHECK(cudaStreamWaitEvent(copy, events_->released[s], 0));
  char* slot = slots_[s].data();
  CRUMB_CUDA_CHECK(cudaMemcpyAsync(slot, x, x_bytes, cudaMemcpyHostToDevice, copy));
  CRUMB_CUDA_CHECK(cudaMemcpyAsync(slot + align_up(x_bytes_), y, y_bytes, cudaMemcpyHostToDevice, copy));
  CRUMB_CUDA_CHECK(cudaEventRecord(events_->copied[s], copy));
#else
  (void)x;
  (void)y;
#endif
}

std::pair<const void*, const void*> InputStaging::await(int i) {
  const int s = i % 2;
#if CRUMB_HAVE_CUDA
  CRUMB_CUDA_CHECK(cudaStreamWaitEvent(cuda::Context::get().compute(), events_->copied[s], 0));
#endif
  return {slots_[s].data(), slots_[s].data() + align_up(x_bytes_)};
}

void InputStaging::release(int i) {
#if CRUMB_HAVE_CUDA
  CRUMB_CUDA_CHECK(cudaEventRecord(events_->released[i % 2], cuda::Context::get().compute()));
#else
  (void)i;
#endif
}

}  // namespace crumb
