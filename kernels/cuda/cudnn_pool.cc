#include "kernels/cuda/cudnn_pool.h"

#include <string>

#include "engine/error.h"
#include "kernels/cuda/check.h"

namespace crumb::cuda {
namespace {

std::string describe(const cpu::Pool2dShape& s) {
  return crumb::detail::concat("pool2d x [", s.n, ", ", s.c, ", ", s.h, ", ", s.w, "] window ", s.kh, "x", s.kw,
                               " stride ", s.stride_h, "x", s.stride_w, " pad ", s.pad_h, "x", s.pad_w);
}

}  // namespace

PoolPlan::PoolPlan(const cpu::Pool2dShape& s, PoolMode mode) : shape_(s), planned_n_(s.n) {
  CRUMB_CHECK(s.n >= 1 && s.c >= 1 && s.h >= 1 && s.w >= 1 && s.kh >= 1 && s.kw >= 1 && s.stride_h >= 1 &&
                  s.stride_w >= 1 && s.pad_h >= 0 && s.pad_w >= 0,
              describe(s), ": bad shape");
  // NaN propagates, so a diverged activation shows in the loss instead of being pooled away.
  const cudnnPoolingMode_t cudnn_mode =
      mode == PoolMode::kMax ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  CRUMB_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_.get(), cudnn_mode, CUDNN_PROPAGATE_NAN, s.kh, s.kw, s.pad_h,
                                                s.pad_w, s.stride_h, s.stride_w));
  detail::set_nchw(x_, s.n, s.c, s.h, s.w);
  detail::set_nchw(y_, s.n, s.c, s.h_out, s.w_out);
  int n = 0, c = 0, h = 0, w = 0;
  CRUMB_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(pool_.get(), x_.get(), &n, &c, &h, &w));
  CRUMB_CHECK(n == s.n && c == s.c && h == s.h_out && w == s.w_out, describe(s), ": output [", s.n, ", ", s.c, ", ",
              s.h_out, ", ", s.w_out, "] disagrees with cuDNN's [", n, ", ", c, ", ", h, ", ", w, "]");
}

void PoolPlan::set_batch(int n) {
  CRUMB_CHECK(n >= 1 && n <= planned_n_, describe(shape_), ": batch ", n, " outside the planned 1..", planned_n_);
  shape_.n = n;
  detail::set_nchw(x_, n, shape_.c, shape_.h, shape_.w);
  detail::set_nchw(y_, n, shape_.c, shape_.h_out, shape_.w_out);
}

void pool_forward(cudnnHandle_t handle, const PoolPlan& plan, float* y, const float* x) {
  const float one = 1.0f, zero = 0.0f;
  CRUMB_CUDNN_CHECK(cudnnPoolingForward(handle, plan.pool_.get(), &one, plan.x_.get(), x, &zero, plan.y_.get(), y));
}

void pool_backward(cudnnHandle_t handle, const PoolPlan& plan, float* dx, const float* dy, const float* y,
                   const float* x, bool accumulate) {
  // beta = 0 makes cuDNN ignore dx's old contents (garbage, NaN), as write mode requires.
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CRUMB_CUDNN_CHECK(cudnnPoolingBackward(handle, plan.pool_.get(), &one, plan.y_.get(), y, plan.y_.get(), dy,
                                         plan.x_.get(), x, &beta, plan.x_.get(), dx));
}

}  // namespace crumb::cuda
