// The optimizers' CUDA kernels (kernels/cuda/sgd.cu, adamw.cu): one launch each over the flat parameter
// block, on the backend's compute stream.
#include "engine/base/registry.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/optim/optimizer.h"
#include "kernels/cuda/adamw.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/sgd.h"

namespace crumb {

namespace {
const OptimizerKernels kCudaKernels = {
    [](Backend& b, float* p, const float* g, float* m, std::size_t n, float lr, float momentum, float wd,
       bool nesterov, bool first) {
      cuda::sgd_momentum_step(p, g, m, n, lr, momentum, wd, nesterov, first, cuda::CudaBackend::of(b).compute());
    },
    [](Backend& b, float* p, const float* g, float* m, float* v, std::size_t n, const AdamWScalars& s) {
      cuda::adamw_step(p, g, m, v, n, s, cuda::CudaBackend::of(b).compute());
    },
    [](Backend& b, uint64_t* out, const float* x, std::size_t n) {
      static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "the kernel counts in unsigned long long");
      cuda::count_nonfinite(reinterpret_cast<unsigned long long*>(out), x, n, cuda::CudaBackend::of(b).compute());
    },
};

}  // namespace

CRUMB_ON_LOAD { register_optimizer_kernels(Device::CUDA, kCudaKernels); }

}  // namespace crumb
