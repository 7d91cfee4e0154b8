// One preallocated, 256-byte aligned block per device. The planner's offsets index it; the train and
// evaluation plans share it (they never run at the same time), so it only ever grows at set-up.
#pragma once
#include <cstddef>

#include "engine/buffer.h"

namespace crumb {

class Arena {
 public:
  explicit Arena(Device device = Device::CPU) : device_(device) {}

  // Grows the block to at least `bytes` (contents are not kept). Set-up only: pointers into the old
  // block become invalid, which the executors detect through base().
  void reserve(std::size_t bytes);
  char* base() const { return block_.data(); }
  std::size_t size() const { return block_.size(); }
  Device device() const { return device_; }

 private:
  Device device_;
  Buffer block_;
};

}  // namespace crumb
