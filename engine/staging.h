// Input staging for a device that cannot read host memory: two device slots, each holding one
// micro-batch of inputs. The copy of micro-batch i+1 runs on the copy stream while micro-batch i computes
// (slot i % 2), and events keep the two streams honest: a copy into a slot waits until the compute that
// last read it is done, and the compute of a micro-batch waits for its copy. Copies from pinned host
// memory (the loader's, engine/data/loader.h) are truly asynchronous; from pageable memory they are
// correct but staged by the driver.
#pragma once
#include <cstddef>
#include <memory>
#include <utility>

#include "engine/buffer.h"

namespace crumb {

class InputStaging {
 public:
  // Two slots of x_bytes + y_bytes each, in CUDA device memory.
  InputStaging(std::size_t x_bytes, std::size_t y_bytes);
  ~InputStaging();
  InputStaging(const InputStaging&) = delete;
  InputStaging& operator=(const InputStaging&) = delete;

  // Enqueues the copy of micro-batch i (x_bytes at x, y_bytes at y; at most the slot sizes) into slot i % 2.
  void copy_in(int i, const void* x, std::size_t x_bytes, const void* y, std::size_t y_bytes);
  // Makes the compute stream wait for micro-batch i's copy; returns the device addresses of its x and y.
  std::pair<const void*, const void*> await(int i);
  // Marks slot i % 2 free once the compute enqueued so far has run.
  void release(int i);

 private:
  struct Events;
  std::size_t x_bytes_, y_bytes_;
  Buffer slots_[2];
  std::unique_ptr<Events> events_;
};

}  // namespace crumb
