// The process's CUDA state (device 0), created on first use: the compute stream every step, optimizer
// step and readback is enqueued on, a second stream for host-to-device input copies, and the cuBLAS and
// cuDNN handles bound to the compute stream. The engine's memory (arenas, parameters, staging) is not
// here: Buffers own it, so that device memory appears where the planner and the budget account for it.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "engine/buffer.h"

#if CRUMB_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace crumb::cuda {

class Context {
 public:
  // Throws crumb::Error when no CUDA device is usable.
  static Context& get();

  // cuBLAS's workspace, given to it at creation so it never allocates during training (32 MiB is
  // NVIDIA's recommendation for Hopper).
  static constexpr std::size_t kBlasWorkspaceBytes = std::size_t{32} << 20;
  // The most workspace one cuDNN convolution pass may take (algorithms that need more are skipped).
  static constexpr std::size_t kConvWorkspaceLimit = std::size_t{256} << 20;

  // "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB), driver CUDA 13.0, cuDNN 9.19.0, cuBLAS 13.1.0".
  std::string description() const;

  cudaStream_t compute() const { return compute_; }
  cudaStream_t copy() const { return copy_; }
  cublasHandle_t blas() const { return blas_; }
#if CRUMB_HAVE_CUDNN
  cudnnHandle_t dnn() const { return dnn_; }
#endif

 private:
  Context();
  // Never destroyed: handles torn down during static destruction race the CUDA runtime's own
  // shutdown; the driver reclaims everything at process exit.
  ~Context() = delete;

  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  Buffer blas_workspace_;
#if CRUMB_HAVE_CUDNN
  cudnnHandle_t dnn_ = nullptr;
#endif
};

}  // namespace crumb::cuda
