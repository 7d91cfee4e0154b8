// The CUDA backend of one device: its compute stream (every step, optimizer step and readback), its copy
// stream (input staging), and the cuBLAS and cuDNN handles bound to the compute stream. The engine's
// memory (arenas, parameters, staging) is not here: Buffers own it, so that device memory appears where
// the planner and the budget account for it. Made by the factory in engine/device/backend.cc.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "engine/device/backend.h"
#include "kernels/half.h"

#if CRUMB_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace crumb::cuda {

class CudaBackend final : public Backend {
 public:
  // Throws crumb::Error when device `index` is not usable.
  explicit CudaBackend(int index);
  // Its streams and handles are never destroyed: teardown during static destruction races the CUDA
  // runtime's own shutdown, and the factory keeps backends for the process (the driver reclaims them).
  ~CudaBackend() override = default;

  // The CUDA backend a step runs on, or a Backend& known to be of device kind CUDA.
  static CudaBackend& of(const StepArgs& a) { return static_cast<CudaBackend&>(*a.backend); }
  static CudaBackend& of(Backend& b) { return static_cast<CudaBackend&>(b); }

  // cuBLAS's workspace, given to it at creation so it never allocates during training (32 MiB is
  // NVIDIA's recommendation for Hopper).
  static constexpr std::size_t kBlasWorkspaceBytes = std::size_t{32} << 20;
  // The most workspace one cuDNN convolution pass may take (algorithms that need more are skipped).
  static constexpr std::size_t kConvWorkspaceLimit = std::size_t{256} << 20;

  cudaStream_t compute() const { return compute_; }
  cudaStream_t copy() const { return copy_; }
  cublasHandle_t blas() const { return blas_; }
#if CRUMB_HAVE_CUDNN
  cudnnHandle_t dnn() const { return dnn_; }
#endif

  // "NVIDIA H100 80GB HBM3 (sm_90, 79.2 GiB), driver CUDA 13.0, cuBLAS 13.1.0, cuDNN 9.14.0".
  std::string description() const override;
  std::size_t free_bytes() const override;
  std::size_t runtime_bytes() const override { return kBlasWorkspaceBytes; }
  bool copies_overlap() const override { return true; }
  bool can_record() const override { return true; }
  // 95% of the free device memory: the rest is left to what cuDNN and the driver allocate for themselves,
  // such as loaded kernels.
  std::size_t default_budget() const override { return free_bytes() / 20 * 19; }
  // float32, and the 16-bit dtypes the device's arithmetic has: F16 everywhere, BF16 from sm_80 (Ampere).
  std::vector<DType> float_dtypes() const override;
  bool has_tf32() const override { return true; }
  // Enough samples to fill the SMs.
  int timing_batch() const override { return 32; }
  std::size_t cache_bytes() const override;
  // NCCL, bootstrapped over MPI (engine/dist/nccl_communicator.h).
  const char* communicator() const override { return "nccl"; }
  void activate() override;
  void zero(void* p, std::size_t bytes) override;
  void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count,
               bool accumulate) override;
  void relayout(void* dst, DType dst_dtype, const void* src, DType src_dtype, ImageShape shape, Layout to,
                bool accumulate) override;
  void synchronize() override;
  void upload(void* p, const void* host_src, std::size_t bytes) override;
  void read_back(void* host_dst, const void* src, std::size_t bytes) override;
  std::unique_ptr<Recording> record(const std::function<void()>& enqueue) override;
  std::unique_ptr<InputStaging> make_staging(const std::vector<std::size_t>& part_bytes) override;
  std::unique_ptr<CopyQueue> make_copy_queue(int tickets) override;
  void* allocate(Memory kind, std::size_t bytes) override;
  void release(Memory kind, void* p) noexcept override;
  void copy(void* dst, const void* src, std::size_t bytes) override;

 private:
  int major_ = 0;  // compute capability
  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* blas_workspace_ = nullptr;  // raw: a Buffer would ask the factory for this very backend
#if CRUMB_HAVE_CUDNN
  cudnnHandle_t dnn_ = nullptr;
#endif
};

}  // namespace crumb::cuda

// Adds the CUDA rows of an implementation templated on the storage type of the graph's float values
// (float, bf16, f16: kernels/half.h) for F32, BF16 and F16 graphs; the optional last argument names the
// other fields, as CRUMB_CPU_ROWS's (engine/graph/op.h).
#define CRUMB_CUDA_ROWS(table, op, fn, ...)                                              \
  do {                                                                                   \
    (table).add(op, Device::CUDA, DType::F32, OpImpl(fn<float>) __VA_ARGS__);           \
    (table).add(op, Device::CUDA, DType::BF16, OpImpl(fn<::crumb::bf16>) __VA_ARGS__);  \
    (table).add(op, Device::CUDA, DType::F16, OpImpl(fn<::crumb::f16>) __VA_ARGS__);    \
  } while (0)
