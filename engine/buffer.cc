#include "engine/buffer.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "engine/error.h"

#if CRUMB_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#endif

namespace crumb {
namespace {

constexpr std::size_t kAlign = 256;

#if CRUMB_HAVE_CUDA
void require_device() {
  CRUMB_CHECK(cuda::cuda_device_available(), "no usable CUDA device (no GPU, or its driver is missing or too old); "
              "use --device cpu");
}
#endif

char* allocate(std::size_t bytes, Memory kind) {
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (kind == Memory::Host) {
    char* p = static_cast<char*>(std::aligned_alloc(kAlign, rounded));
    CRUMB_CHECK(p, "out of host memory: could not allocate ", rounded,
                " bytes (lower --batch, --micro-batch or the model size)");
    std::memset(p, 0, rounded);
    return p;
  }
#if CRUMB_HAVE_CUDA
  require_device();
  void* p = nullptr;
  if (kind == Memory::Pinned) {
    if (cudaHostAlloc(&p, rounded, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      CRUMB_FAIL("out of pinned host memory: could not allocate ", rounded, " bytes (lower --batch)");
    }
    std::memset(p, 0, rounded);
  } else {
    if (cudaMalloc(&p, rounded) != cudaSuccess) {
      cudaGetLastError();  // out-of-memory is not sticky: clear it so later checks do not report it again
      std::size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      CRUMB_FAIL("out of GPU memory: could not allocate ", rounded, " bytes with ", free_bytes, " of ", total,
                 " free (lower --batch, --micro-batch or --memory-budget)");
    }
    CRUMB_CUDA_CHECK(cudaMemset(p, 0, rounded));
    // cudaMemset is asynchronous on the legacy default stream, which the engine's non-blocking streams
    // do not wait for: finish it here, so no later kernel or copy can race the zero fill.
    CRUMB_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return static_cast<char*>(p);
#else
  CRUMB_FAIL("this build of Crumb has no CUDA backend (build it where nvcc and the CUDA toolkit are found), "
             "so it cannot allocate ", kind == Memory::Pinned ? "pinned" : "device", " memory; use --device cpu");
#endif
}

void release(char* p, Memory kind) {
  if (!p) return;
  if (kind == Memory::Host) {
    std::free(p);
    return;
  }
#if CRUMB_HAVE_CUDA
  // A destructor must not throw; a failure here means the context is already gone (process exit).
  if (kind == Memory::Pinned)
    cudaFreeHost(p);
  else
    cudaFree(p);
#endif
}

}  // namespace

Buffer::Buffer(std::size_t bytes, Memory kind) : kind_(kind) {
  if (bytes == 0) return;
  data_ = allocate(bytes, kind);
  size_ = bytes;
}

Buffer::~Buffer() { release(data_, kind_); }

Buffer::Buffer(Buffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), kind_(o.kind_) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  std::swap(kind_, o.kind_);
  return *this;
}

void copy_bytes(void* dst, Memory dst_kind, const void* src, Memory src_kind, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_kind != Memory::Cuda && src_kind != Memory::Cuda) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if CRUMB_HAVE_CUDA
  // Work queued on the engine's streams may still be writing src (or reading dst): wait for all of it.
  // cudaMemcpyDefault infers the direction from the pointers (unified addressing).
  CRUMB_CUDA_CHECK(cudaDeviceSynchronize());
  CRUMB_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  // cudaMemcpy from pageable memory to the device may return before the DMA lands (and device to
  // device does not wait at all); the engine's streams do not wait for the legacy stream, so wait here.
  CRUMB_CUDA_CHECK(cudaDeviceSynchronize());
#else
  CRUMB_FAIL("this build of Crumb has no CUDA backend");
#endif
}

MirroredBuffer::MirroredBuffer(std::size_t bytes, Device device) : host_(bytes, Memory::Host) {
  if (device == Device::CUDA) device_ = Buffer(bytes, Memory::Cuda);
}

void MirroredBuffer::to_device() {
  if (device_.size()) copy_bytes(device_.data(), Memory::Cuda, host_.data(), Memory::Host, size());
}

void MirroredBuffer::to_host() {
  if (device_.size()) copy_bytes(host_.data(), Memory::Host, device_.data(), Memory::Cuda, size());
}

}  // namespace crumb
