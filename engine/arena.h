// One preallocated, 256-byte aligned block per device. The planner's offsets index it; the train and
// evaluation plans share it (they never run at the same time), so it only ever grows at set-up.
#pragma once
#include <cstddef>

namespace crumb {

class Arena {
 public:
  Arena() = default;
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Grows the block to at least `bytes` (contents are not kept). Set-up only: pointers into the old
  // block become invalid, which the executors detect through base().
  void reserve(std::size_t bytes);
  char* base() const { return base_; }
  std::size_t size() const { return size_; }

 private:
  char* base_ = nullptr;
  std::size_t size_ = 0;
};

// A 64-byte aligned heap buffer for persistent state (parameters, gradients, optimizer state).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace crumb
