// Owning blocks of memory, all allocated at set-up: host memory (parameters of CPU runs, batch buffers),
// pinned host memory (batch buffers the GPU copies from asynchronously) and CUDA device memory
// (arenas, parameters, staging). Allocation failures are one-line crumb::Errors naming what to lower.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/base/tensor.h"

namespace crumb {

enum class Memory : uint8_t {
  Host,    // 256-byte aligned heap memory
  Pinned,  // page-locked host memory (cudaHostAlloc): the source of asynchronous host-to-device copies
  Cuda,    // device memory of one CUDA device
};

inline const char* memory_name(Memory kind) {
  return kind == Memory::Host ? "host" : kind == Memory::Pinned ? "pinned" : "cuda";
}

class Buffer {
 public:
  Buffer() = default;
  // Zero-filled, 256-byte aligned. Pinned and Cuda memory come from the backend that serves them
  // (engine/device/backend.h's backend_serving), device `device` of its kind. Throws crumb::Error when the
  // memory is not there (or, for Pinned and Cuda, when this build has no CUDA or that device is not usable).
  Buffer(std::size_t bytes, Memory kind, int device = 0);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  char* data() const { return data_; }
  std::size_t size() const { return size_; }
  Memory kind() const { return kind_; }
  int device() const { return device_; }  // the CUDA device of Pinned and Cuda memory

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  Memory kind_ = Memory::Host;
  int device_ = 0;
};

// Synchronous copy of `bytes` between any two kinds of memory (set-up, checkpoints and tests only);
// `device` is the CUDA device of the Cuda side.
void copy_bytes(void* dst, Memory dst_kind, const void* src, Memory src_kind, std::size_t bytes, int device = 0);

// A persistent block the engine computes on (device()) with a host copy for initialisation, checkpoints
// and inspection (host()). On the CPU both are the same memory and the transfers do nothing; on CUDA the
// host copy is only current after to_host(), and the device copy after to_device().
class MirroredBuffer {
 public:
  MirroredBuffer() = default;
  // On device `index` of its kind (CUDA devices are numbered; the CPU is device 0), in its memory().
  MirroredBuffer(std::size_t bytes, Device device, int index = 0);
  char* host() const { return host_.data(); }
  char* device() const { return device_.size() ? device_.data() : host_.data(); }
  std::size_t size() const { return host_.size(); }
  void to_device();
  void to_host();

 private:
  Buffer host_, device_;  // device_ stays empty where the device computes in host memory (the CPU)
};

}  // namespace crumb
