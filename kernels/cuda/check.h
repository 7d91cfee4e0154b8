// Status checks for the CUDA runtime, cuBLAS and cuDNN. Every library call of the CUDA backend goes
// through one of the macros below, so a failure surfaces as a crumb::Error naming the file, the line,
// the call as written and the library's own error string, instead of a status code lost further on.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#if CRUMB_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace crumb::cuda {

// Return normally on success and throw crumb::Error otherwise. `call` is the call's source text.
void check_cuda(cudaError_t status, const char* call, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);
#if CRUMB_HAVE_CUDNN
void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line);
#endif

// Whether a CUDA device can be used: false on any runtime failure (no driver, a driver older than
// the runtime, no device) as well as for zero devices. The failure is cleared from the runtime's
// last-error slot, so it does not resurface in a later launch check (without a usable driver the
// runtime reports it on every call anyway; nothing should be launched then).
bool cuda_device_available();

}  // namespace crumb::cuda

#define CRUMB_CUDA_CHECK(call) ::crumb::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define CRUMB_CUBLAS_CHECK(call) ::crumb::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#if CRUMB_HAVE_CUDNN
#define CRUMB_CUDNN_CHECK(call) ::crumb::cuda::check_cudnn((call), #call, __FILE__, __LINE__)
#endif
// After a kernel launch: reports a bad launch configuration at the launch site. Faults inside the
// kernel are asynchronous and surface at the next synchronising call.
#define CRUMB_CUDA_CHECK_LAUNCH() CRUMB_CUDA_CHECK(cudaGetLastError())
