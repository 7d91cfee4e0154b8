#include "engine/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "kernels/convert.h"
#include "kernels/cuda/check.h"

namespace crumb::cuda {
namespace {

class GraphRecording final : public Recording {
 public:
  GraphRecording(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~GraphRecording() override { cudaGraphExecDestroy(exec_); }
  GraphRecording(const GraphRecording&) = delete;
  GraphRecording& operator=(const GraphRecording&) = delete;
  void replay() override { CRUMB_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

// Ends the capture on `stream`; the captured graph, or null when the capture was invalidated (by a call
// that cannot be captured) or failed.
cudaGraph_t end_capture(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // capture errors are not sticky; clear them so later checks see only their own
    return nullptr;
  }
  return graph;
}

}  // namespace

CudaBackend::CudaBackend(int index) : Backend(Device::CUDA, index) {
  int count = 0;
  CRUMB_CHECK(cuda_device_available() && cudaGetDeviceCount(&count) == cudaSuccess && index >= 0 && index < count,
              "no usable CUDA device ", index, " (no GPU, or its driver is missing or too old); use --device cpu");
  CRUMB_CUDA_CHECK(cudaSetDevice(index));
  CRUMB_CUDA_CHECK(cudaDeviceGetAttribute(&major_, cudaDevAttrComputeCapabilityMajor, index));
  // Non-blocking: the engine's streams never wait for work others put on the legacy default stream.
  // Set-up copies (engine/device/buffer.cc) synchronise the whole device instead.
  CRUMB_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  CRUMB_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  CRUMB_CUBLAS_CHECK(cublasCreate(&blas_));
  // cublasSetStream resets the workspace to cuBLAS's default pool, so the stream goes first.
  CRUMB_CUBLAS_CHECK(cublasSetStream(blas_, compute_));
  blas_workspace_ = allocate(Memory::Cuda, kBlasWorkspaceBytes);
  CRUMB_CUBLAS_CHECK(cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspaceBytes));
#if CRUMB_HAVE_CUDNN
  CRUMB_CUDNN_CHECK(cudnnCreate(&dnn_));
  CRUMB_CUDNN_CHECK(cudnnSetStream(dnn_, compute_));
#endif
}

void* CudaBackend::allocate(Memory kind, std::size_t bytes) {
  CRUMB_CUDA_CHECK(cudaSetDevice(index()));
  void* p = nullptr;
  if (kind == Memory::Pinned) {
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      CRUMB_FAIL("out of pinned host memory: could not allocate ", bytes, " bytes (lower --batch)");
    }
    std::memset(p, 0, bytes);
    return p;
  }
  CRUMB_CHECK(kind == Memory::Cuda, "the CUDA backend allocates pinned and device memory, not host memory");
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    cudaGetLastError();  // out-of-memory is not sticky: clear it so later checks do not report it again
    std::size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    CRUMB_FAIL("out of GPU memory: could not allocate ", bytes, " bytes with ", free_bytes, " of ", total,
               " free (lower --batch, --micro-batch or --memory-budget)");
  }
  CRUMB_CUDA_CHECK(cudaMemset(p, 0, bytes));
  // cudaMemset is asynchronous on the legacy default stream, which the engine's non-blocking streams do
  // not wait for: finish it here, so no later kernel or copy can race the zero fill.
  CRUMB_CUDA_CHECK(cudaDeviceSynchronize());
  return p;
}

void CudaBackend::release(Memory kind, void* p) noexcept {
  // A failure here means the context is already gone (process exit): nothing to do about it.
  if (kind == Memory::Pinned)
    cudaFreeHost(p);
  else
    cudaFree(p);
}

void CudaBackend::copy(void* dst, const void* src, std::size_t bytes) {
  // Work queued on the engine's streams may still be writing src (or reading dst): wait for all of it.
  // cudaMemcpyDefault infers the direction from the pointers (unified addressing).
  CRUMB_CUDA_CHECK(cudaDeviceSynchronize());
  CRUMB_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  // cudaMemcpy from pageable memory to the device may return before the DMA lands (and device to device
  // does not wait at all); the engine's streams do not wait for the legacy stream, so wait here.
  CRUMB_CUDA_CHECK(cudaDeviceSynchronize());
}

std::string CudaBackend::description() const {
  cudaDeviceProp prop{};
  CRUMB_CUDA_CHECK(cudaGetDeviceProperties(&prop, index()));
  int driver = 0, blas = 0;
  CRUMB_CUDA_CHECK(cudaDriverGetVersion(&driver));
  CRUMB_CUBLAS_CHECK(cublasGetVersion(blas_, &blas));
  char text[512];
  std::snprintf(text, sizeof text, "%s (sm_%d%d, %.1f GiB), driver CUDA %d.%d, cuBLAS %d.%d.%d", prop.name, prop.major,
                prop.minor, prop.totalGlobalMem / 1073741824.0, driver / 1000, driver % 1000 / 10, blas / 10000,
                blas % 10000 / 100, blas % 100);
  std::string s = text;
#if CRUMB_HAVE_CUDNN
  const std::size_t dnn = cudnnGetVersion();  // major*10000 + minor*100 + patch since cuDNN 9
  s += crumb::detail::concat(", cuDNN ", dnn / 10000, ".", dnn % 10000 / 100, ".", dnn % 100);
#endif
  return s;
}

std::size_t CudaBackend::free_bytes() const {
  std::size_t free_bytes = 0, total = 0;
  CRUMB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
}

std::size_t CudaBackend::cache_bytes() const {
  int bytes = 0;
  CRUMB_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, index()));
  return static_cast<std::size_t>(std::max(bytes, 0));
}

void CudaBackend::activate() { CRUMB_CUDA_CHECK(cudaSetDevice(index())); }

void CudaBackend::synchronize() {
  activate();
  CRUMB_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

void CudaBackend::zero(void* p, std::size_t bytes) { CRUMB_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, compute_)); }

void CudaBackend::convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count,
                          bool accumulate) {
  cuda::convert(dst, dst_dtype, src, src_dtype, count, accumulate, compute_);
}

void CudaBackend::relayout(void* dst, DType dst_dtype, const void* src, DType src_dtype, ImageShape shape,
                           Layout to, bool accumulate) {
  cuda::relayout(dst, dst_dtype, src, src_dtype, shape, to, accumulate, compute_);
}

std::vector<DType> CudaBackend::float_dtypes() const {
  if (major_ >= 8) return {DType::F32, DType::F16, DType::BF16};
  return {DType::F32, DType::F16};
}

void CudaBackend::upload(void* p, const void* host_src, std::size_t bytes) {
  // From pageable memory the runtime copies the bytes to a staging buffer before returning, so the
  // caller may overwrite them at once; the copy itself runs in stream order.
  CRUMB_CUDA_CHECK(cudaMemcpyAsync(p, host_src, bytes, cudaMemcpyHostToDevice, compute_));
}

void CudaBackend::read_back(void* host_dst, const void* src, std::size_t bytes) {
  CRUMB_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, compute_));
  // Kernel faults of the steps before surface here, named by this call.
  CRUMB_CUDA_CHECK(cudaStreamSynchronize(compute_));
}

std::unique_ptr<Recording> CudaBackend::record(const std::function<void()>& enqueue) {
  // Thread-local mode: only this thread's unsafe calls (a cudaMalloc, a synchronisation) invalidate the
  // capture; other threads (the loader) are not affected.
  CRUMB_CUDA_CHECK(cudaStreamBeginCapture(compute_, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    // Refused (a call invalidated the capture): the caller runs it without. Any other error is the run's own
    // and propagates, even when EndCapture fails because a swap copy left the copy stream forked.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const bool refused = cudaStreamIsCapturing(compute_, &status) != cudaSuccess ||
                         status == cudaStreamCaptureStatusInvalidated;
    if (cudaGraph_t graph = end_capture(compute_)) cudaGraphDestroy(graph);
    if (refused) return nullptr;
    throw;
  }
  cudaGraph_t graph = end_capture(compute_);
  if (!graph) return nullptr;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return std::make_unique<GraphRecording>(exec, compute_);
}

CRUMB_ON_LOAD {
  register_device(Device::CUDA, {cuda_device_available,
                                 [](int index) -> std::unique_ptr<Backend> { return std::make_unique<CudaBackend>(index); },
                                 Memory::Cuda, Memory::Pinned});
}

}  // namespace crumb::cuda
