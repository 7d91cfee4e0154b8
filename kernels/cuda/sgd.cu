// The optimizer step over the engine's single contiguous parameter block: one launch updates every
// parameter of the model (the multi-tensor step comes for free from the layout).
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/sgd.h"

namespace crumb::cuda {
namespace {
using detail::blocks_for;
using detail::global_index;
using detail::kBlock;

template <class C>
__global__ void sgd_momentum_step_kernel(float* __restrict__ params, const float* __restrict__ grads,
                                         float* __restrict__ momentum_buf, std::size_t count, float lr, float momentum,
                                         float weight_decay, bool nesterov, bool first_step, float grad_scale,
                                         void* __restrict__ copy) {
  const std::size_t i = global_index();
  if (i >= count) return;
  const float g = grads[i] * grad_scale + weight_decay * params[i];
  float p;
  // Plain SGD never touches the buffer, which may then be null. The branch is uniform over the grid.
  if (momentum == 0.0f) {
    p = params[i] - lr * g;
  } else {
    // A select, not a blend: on the first step the buffer may hold garbage (even NaN).
    const float buf = first_step ? g : momentum * momentum_buf[i] + g;
    momentum_buf[i] = buf;
    p = params[i] - lr * (nesterov ? g + momentum * buf : buf);
  }
  params[i] = p;
  store_copy<C>(copy, i, p);
}

}  // namespace

void sgd_momentum_step(float* params, const float* grads, float* momentum_buf, std::size_t count, float lr,
                       float momentum, float weight_decay, bool nesterov, bool first_step, const StepExtras& x,
                       cudaStream_t stream) {
  CRUMB_CHECK(momentum == 0.0f || momentum_buf != nullptr, "sgd_momentum_step: momentum ", momentum,
              " needs a momentum buffer");
  CRUMB_CHECK(!nesterov || momentum != 0.0f, "sgd_momentum_step: Nesterov needs a momentum");
  if (count == 0) return;
  with_copy_type(x, [&](auto copy_type) {
    sgd_momentum_step_kernel<decltype(copy_type)><<<blocks_for(count), kBlock, 0, stream>>>(
        params, grads, momentum_buf, count, lr, momentum, weight_decay, nesterov, first_step, x.grad_scale, x.copy);
  });
  CRUMB_CUDA_CHECK_LAUNCH();
}

}  // namespace crumb::cuda
