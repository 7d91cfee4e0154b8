#include "engine/cuda/context.h"

#include <cstdio>

#include "engine/error.h"
#include "kernels/cuda/check.h"

namespace crumb::cuda {

Context& Context::get() {
  // A function-local static: created once, thread-safe; a failed creation throws and is retried next time.
  static Context* context = new Context();
  return *context;
}

Context::Context() {
  CRUMB_CHECK(cuda_device_available(), "no usable CUDA device (no GPU, or its driver is missing or too old); "
              "use --device cpu");
  CRUMB_CUDA_CHECK(cudaSetDevice(0));
  // Non-blocking: the engine's streams never wait for work others put on the legacy default stream.
  // Set-up copies (engine/buffer.cc) synchronise the whole device instead.
  CRUMB_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  CRUMB_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  CRUMB_CUBLAS_CHECK(cublasCreate(&blas_));
  // cublasSetStream resets the workspace to cuBLAS's default pool, so the stream goes first.
  CRUMB_CUBLAS_CHECK(cublasSetStream(blas_, compute_));
  blas_workspace_ = Buffer(kBlasWorkspaceBytes, Memory::Cuda);
  CRUMB_CUBLAS_CHECK(cublasSetWorkspace(blas_, blas_workspace_.data(), blas_workspace_.size()));
#if CRUMB_HAVE_CUDNN
  CRUMB_CUDNN_CHECK(cudnnCreate(&dnn_));
  CRUMB_CUDNN_CHECK(cudnnSetStream(dnn_, compute_));
#endif
}

std::string Context::description() const {
  cudaDeviceProp prop{};
  CRUMB_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
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

}  // namespace crumb::cuda
