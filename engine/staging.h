// Input staging for a device that cannot read host memory: two device slots, each holding one
// micro-batch of inputs. The copy of micro-batch i+1 runs on the copy stream while micro-batch i computes
// (slot i % 2), and events keep the two streams honest: a copy into a slot waits until the compute that
// last read it is done, and the compute of a micro-batch waits for its copy. Copies from pinned host
// memory (the loader's, engine/data/loader.h) are truly asynchronous; from pageable memory they are
// correct but staged by the driver.
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

#include "engine/buffer.h"

namespace crumb {

class InputStaging {
 public:
  // Two slots, each holding one micro-batch of every input (input k takes up to part_bytes[k]), in CUDA
  // device memory.
  explicit InputStaging(const std::vector<std::size_t>& part_bytes);
  ~InputStaging();
  InputStaging(const InputStaging&) = delete;
  InputStaging& operator=(const InputStaging&) = delete;

  // Enqueues the copy of micro-batch i's input k (bytes at src, at most its part) into slot i % 2; then
  // copied(i) marks the slot's copies done.
  void copy_in(int i, std::size_t k, const void* src, std::size_t bytes);
  void copied(int i);
  // Makes the compute stream wait for micro-batch i's copies.
  void await(int i);
  // The device address of micro-batch i's input k.
  const void* slot(int i, std::size_t k) const { return slots_[i % 2].data() + offset_[k]; }
  // Marks slot i % 2 free once the compute enqueued so far has run.
  void release(int i);

 private:
  struct Events;
  std::vector<std::size_t> part_bytes_, offset_;
  Buffer slots_[2];
  std::unique_ptr<Events> events_;
};

}  // namespace crumb
