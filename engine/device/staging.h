// Input staging for a device that cannot read host memory: two device slots, each holding one
// micro-batch of every graph input. The copy of micro-batch i+1 runs on the copy stream while micro-batch i
// computes (slot i % 2), and events keep the two streams honest: a copy into a slot waits until the
// compute that last read it is done, and the compute of a micro-batch waits for its copy. Copies from
// pinned host memory (the loader's micro-batch slots, engine/data/loader.h) are truly asynchronous; from pageable memory
// they are correct but staged by the driver. A Backend makes one (Backend::make_staging; CUDA:
// engine/cuda/staging.cc); the CPU needs none.
#pragma once
#include <cstddef>

namespace crumb {

class InputStaging {
 public:
  virtual ~InputStaging() = default;
  // Enqueues the copy of micro-batch i's input k (bytes at src, at most its part) into slot i % 2; then
  // copied(i) marks the slot's copies done.
  virtual void copy_in(int i, std::size_t k, const void* src, std::size_t bytes) = 0;
  virtual void copied(int i) = 0;
  // Blocks the host until micro-batch i's copies are done, so the host memory they read may be reused.
  virtual void wait_copied(int i) = 0;
  // Makes the compute stream wait for micro-batch i's copies.
  virtual void await(int i) = 0;
  // The device address of micro-batch i's input k.
  virtual const void* slot(int i, std::size_t k) const = 0;
  // Marks slot i % 2 free once the compute enqueued so far has run.
  virtual void release(int i) = 0;
};

}  // namespace crumb
