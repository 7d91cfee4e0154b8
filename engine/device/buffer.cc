#include "engine/device/buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "engine/device/backend.h"
#include "engine/base/error.h"

namespace crumb {
namespace {

constexpr std::size_t kAlign = 256;

char* allocate(std::size_t bytes, Memory kind, int device) {
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (kind == Memory::Host) {
    char* p = static_cast<char*>(std::aligned_alloc(kAlign, rounded));
    CRUMB_CHECK(p, "out of host memory: could not allocate ", rounded,
                " bytes (lower --batch, --micro-batch or the model size)");
    std::memset(p, 0, rounded);
    return p;
  }
  // Pinned and device memory come from the GPU's backend (an error naming --device cpu without one).
  return static_cast<char*>(backend_serving(kind, device).allocate(kind, rounded));
}

void release(char* p, Memory kind, int device) {
  if (!p) return;
  if (kind == Memory::Host) {
    std::free(p);
    return;
  }
  backend_serving(kind, device).release(kind, p);  // a buffer of this kind exists, so its backend does too
}

}  // namespace

Buffer::Buffer(std::size_t bytes, Memory kind, int device) : kind_(kind), device_(device) {
  if (bytes == 0) return;
  data_ = allocate(bytes, kind, device);
  size_ = bytes;
}

Buffer::~Buffer() { release(data_, kind_, device_); }

Buffer::Buffer(Buffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), kind_(o.kind_), device_(o.device_) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  std::swap(kind_, o.kind_);
  std::swap(device_, o.device_);
  return *this;
}

void copy_bytes(void* dst, Memory dst_kind, const void* src, Memory src_kind, std::size_t bytes, int device) {
  if (bytes == 0) return;
  if (dst_kind != Memory::Cuda && src_kind != Memory::Cuda) {
    std::memcpy(dst, src, bytes);
    return;
  }
  backend_serving(Memory::Cuda, device).copy(dst, src, bytes);
}

MirroredBuffer::MirroredBuffer(std::size_t bytes, Device device, int index) : host_(bytes, Memory::Host) {
  const Memory kind = memory_of(device);
  if (kind != Memory::Host) device_ = Buffer(bytes, kind, index);
}

void MirroredBuffer::to_device() {
  if (device_.size()) copy_bytes(device_.data(), device_.kind(), host_.data(), Memory::Host, size(), device_.device());
}

void MirroredBuffer::to_host() {
  if (device_.size()) copy_bytes(host_.data(), Memory::Host, device_.data(), device_.kind(), size(), device_.device());
}

}  // namespace crumb
