#include "engine/arena.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "engine/error.h"
#include "engine/planner.h"

namespace crumb {
namespace {
char* aligned_zeroed(std::size_t bytes, std::size_t align) {
  if (bytes == 0) return nullptr;
  const std::size_t rounded = align_up(bytes, align);
  char* p = static_cast<char*>(std::aligned_alloc(align, rounded));
  CRUMB_CHECK(p, "out of host memory: could not allocate ", rounded, " bytes (lower --batch, --micro-batch or the model size)");
  std::memset(p, 0, rounded);
  return p;
}
}  // namespace

Arena::~Arena() { std::free(base_); }

void Arena::reserve(std::size_t bytes) {
  if (bytes <= size_) return;
  std::free(base_);
  base_ = nullptr;
  size_ = 0;
  base_ = aligned_zeroed(bytes, kArenaAlign);
  size_ = bytes;
}

AlignedBuffer::AlignedBuffer(std::size_t bytes) : data_(aligned_zeroed(bytes, 64)), size_(bytes) {}
AlignedBuffer::~AlignedBuffer() { std::free(data_); }
AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  return *this;
}

}  // namespace crumb
