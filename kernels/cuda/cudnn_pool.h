// 2-D max and average pooling on cuDNN (NCHW float; shapes and write modes as the CPU twins in
// kernels/cpu/kernels.h): x [n, c, h, w], y [n, c, h_out, w_out], floor output size.
// Padding cells never win a max and count as zeros in the average (PyTorch's count_include_pad=True).
// The handle carries the stream (cudnnSetStream, set once by the engine).
#pragma once
#include <cudnn.h>

#include "kernels/cpu/shapes.h"
#include "kernels/cuda/cudnn_descriptors.h"

namespace crumb::cuda {

enum class PoolMode { kMax, kAverage };

// Descriptors of one pooling layer, built once for its largest micro-batch.
class PoolPlan {
 public:
  // shape.n is the largest micro-batch.
  PoolPlan(const cpu::Pool2dShape& shape, PoolMode mode);
  // Re-targets the plan to n samples, 1 <= n <= the planned batch (the ragged last micro-batch): only
  // the x/y descriptors are re-set, which allocates nothing and does no device work.
  void set_batch(int n);
  // The current shape (n as last set).
  const cpu::Pool2dShape& shape() const { return shape_; }

 private:
  friend void pool_forward(cudnnHandle_t, const PoolPlan&, float*, const float*);
  friend void pool_backward(cudnnHandle_t, const PoolPlan&, float*, const float*, const float*, const float*, bool);

  cpu::Pool2dShape shape_;
  int planned_n_;
  detail::TensorDescriptor x_, y_;  // x and y double as dx and dy
  detail::PoolingDescriptor pool_;
};

void pool_forward(cudnnHandle_t handle, const PoolPlan& plan, float* y, const float* x);
// dx (=|+=) the gradient of the pool for dy. Unlike the CPU kernels, cuDNN needs both the forward input x
// and output y, for either mode. Max routes each dy to one maximum of its window (cuDNN's deterministic
// max); for tied maxima this need not be the first one, which the CPU kernel picks.
void pool_backward(cudnnHandle_t handle, const PoolPlan& plan, float* dx, const float* dy, const float* y,
                   const float* x, bool accumulate);

}  // namespace crumb::cuda
