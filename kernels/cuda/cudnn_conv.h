// conv2d on cuDNN (NCHW float; shapes and write modes as the CPU twins in kernels/cpu/kernels.h):
// x [n, c_in, h, w], w [c_out, c_in, kh, kw], b [c_out], y [n, c_out, h_out, w_out].
// The handle carries the stream (cudnnSetStream, set once by the engine).
// Uses cuDNN's legacy convolution API (deprecated in cuDNN 9, still complete there), which needs no
// graph building: a plan is a handful of descriptors and three algorithm ids.
#pragma once
#include <cudnn.h>

#include <cstddef>

#include "kernels/cpu/shapes.h"
#include "kernels/cuda/cudnn_descriptors.h"

namespace crumb::cuda {

enum class ConvPass { Forward, BackwardData, BackwardFilter };

// Descriptors and algorithms of one conv2d layer, built once per layer for its largest micro-batch.
// Algorithms come from cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7): the first, in cuDNN's
// order of expected speed, whose workspace fits the limit. Math is FP32 FMA only (no TF32), so results
// match the CPU to float rounding.
class ConvPlan {
 public:
  // shape.n is the largest micro-batch. Throws if a pass has no algorithm within workspace_limit bytes.
  ConvPlan(cudnnHandle_t handle, const cpu::Conv2dShape& shape, std::size_t workspace_limit);

  // Re-targets the plan to n samples, 1 <= n <= the planned batch (the ragged last micro-batch; also
  // back to the full batch). Only the x/y descriptors are re-set, which allocates nothing and does no
  // device work; the algorithms stay, and their workspace at n is checked against the planned sizes.
  void set_batch(cudnnHandle_t handle, int n);

  // The current shape (n as last set).
  const cpu::Conv2dShape& shape() const { return shape_; }
  // Workspace bytes of one pass at any batch up to the planned one.
  std::size_t workspace_bytes(ConvPass pass) const;
  // The largest of the three: the passes run one at a time, so they can share a workspace of this size.
  std::size_t workspace_bytes() const;

 private:
  friend void conv_forward(cudnnHandle_t, const ConvPlan&, float*, const float*, const float*, const float*, void*,
                           std::size_t);
  friend void conv_backward_data(cudnnHandle_t, const ConvPlan&, float*, const float*, const float*, void*, std::size_t,
                                 bool);
  friend void conv_backward_filter(cudnnHandle_t, const ConvPlan&, float*, float*, const float*, const float*, void*,
                                   std::size_t, bool);

  cpu::Conv2dShape shape_;
  int planned_n_;
  detail::TensorDescriptor x_, y_, bias_;  // x and y double as dx and dy
  detail::FilterDescriptor w_;             // doubles as dw
  detail::ConvolutionDescriptor conv_;
  cudnnConvolutionFwdAlgo_t fwd_algo_;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_;
  // Workspace bytes of each pass at the planned batch.
  std::size_t fwd_bytes_ = 0, bwd_data_bytes_ = 0, bwd_filter_bytes_ = 0;
};

// y = conv(x, w) + b (b may be null). workspace: device scratch of workspace_bytes >= plan.workspace_bytes().
void conv_forward(cudnnHandle_t handle, const ConvPlan& plan, float* y, const float* x, const float* w, const float* b,
                  void* workspace, std::size_t workspace_bytes);
// dx (=|+=) conv-transpose of dy with w
void conv_backward_data(cudnnHandle_t handle, const ConvPlan& plan, float* dx, const float* dy, const float* w,
                        void* workspace, std::size_t workspace_bytes, bool accumulate);
// dw (=|+=) correlation of x with dy; db (=|+=) sum of dy over n, h, w (db may be null)
void conv_backward_filter(cudnnHandle_t handle, const ConvPlan& plan, float* dw, float* db, const float* dy,
                          const float* x, void* workspace, std::size_t workspace_bytes, bool accumulate);

}  // namespace crumb::cuda
