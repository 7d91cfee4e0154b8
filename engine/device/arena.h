// One preallocated, 256-byte aligned block per device. The planner's offsets index it; the train and
// evaluation plans share it (they never run at the same time). It is sized once, before the executors
// that use it resolve their pointers into it: growing it under an attached executor is an error, not a
// silent re-resolution.
#pragma once
#include <cstddef>

#include "engine/device/buffer.h"

namespace crumb {

class Arena {
 public:
  // On device `index` of its kind (the CPU is device 0).
  explicit Arena(Device device = Device::CPU, int index = 0) : device_(device), index_(index) {}

  // Grows the block to at least `bytes` (contents are not kept). Throws when an executor is attached,
  // since its pointers would dangle: reserve the largest plan's size first.
  void reserve(std::size_t bytes);
  // An executor resolved its pointers into the block (attach) or is gone (detach).
  void attach() { ++attached_; }
  void detach() { --attached_; }
  char* base() const { return block_.data(); }
  std::size_t size() const { return block_.size(); }
  Device device() const { return device_; }
  int index() const { return index_; }

 private:
  Device device_;
  int index_;
  Buffer block_;
  int attached_ = 0;
};

}  // namespace crumb
