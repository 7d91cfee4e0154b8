#include "kernels/cuda/check.h"

#include "engine/base/error.h"

namespace crumb::cuda {
namespace {

[[noreturn]] void fail(const char* library, const char* call, const char* file, int line, const char* name,
                       const char* message) {
  CRUMB_FAIL(library, " error at ", file, ":", line, ": ", call, " failed: ", message, " (", name, ")");
}

}  // namespace

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) fail("CUDA", call, file, line, cudaGetErrorName(status), cudaGetErrorString(status));
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail("cuBLAS", call, file, line, cublasGetStatusName(status), cublasGetStatusString(status));
}

#if CRUMB_HAVE_CUDNN
void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS) {
    // cuDNN keeps a longer explanation of the last failure on this thread; it names the bad argument.
    char detail[1024] = "";
    cudnnGetLastErrorString(detail, sizeof detail);
    fail("cuDNN", call, file, line, cudnnGetErrorString(status), detail[0] ? detail : "no detail from cuDNN");
  }
}
#endif

bool cuda_device_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace crumb::cuda
