#include "kernels/cuda/cudnn_conv.h"

#include <algorithm>
#include <string>

#include "engine/error.h"
#include "kernels/cuda/check.h"

namespace crumb::cuda {
namespace {

std::string describe(const cpu::Conv2dShape& s) {
  return crumb::detail::concat("conv2d x [", s.n, ", ", s.c_in, ", ", s.h, ", ", s.w, "] w [", s.c_out, ", ", s.c_in,
                               ", ", s.kh, ", ", s.kw, "] stride ", s.stride_h, "x", s.stride_w, " pad ", s.pad_h, "x",
                               s.pad_w);
}

// The first of cuDNN's ranked candidates that runs, uses FMA math and whose workspace (as reported by
// `bytes_of(algo, &bytes)`) fits `limit`; its workspace goes to *bytes. Tensor-op candidates would
// compute a float convolution in TF32.
template <class Perf, class BytesOf>
auto pick_algo(const Perf* perf, int count, std::size_t limit, BytesOf bytes_of, std::size_t* bytes, const char* pass,
               const cpu::Conv2dShape& s) -> decltype(perf->algo) {
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.mathType == CUDNN_TENSOR_OP_MATH ||
        p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)
      continue;
    if (bytes_of(p.algo, bytes) == CUDNN_STATUS_SUCCESS && *bytes <= limit) return p.algo;
  }
  CRUMB_FAIL(describe(s), ": no cuDNN ", pass, " algorithm in FP32 fits the workspace limit of ", limit, " bytes (",
             count, " candidates); raise the limit");
}

void check_workspace(std::size_t need, std::size_t have, const char* pass, const cpu::Conv2dShape& s) {
  CRUMB_CHECK(have >= need, describe(s), ": the ", pass, " pass needs ", need, " bytes of workspace, got ", have);
}

}  // namespace

ConvPlan::ConvPlan(cudnnHandle_t handle, const cpu::Conv2dShape& s, std::size_t workspace_limit)
    : shape_(s), planned_n_(s.n) {
  CRUMB_CHECK(s.n >= 1 && s.c_in >= 1 && s.h >= 1 && s.w >= 1 && s.c_out >= 1 && s.kh >= 1 && s.kw >= 1 &&
                  s.stride_h >= 1 && s.stride_w >= 1 && s.pad_h >= 0 && s.pad_w >= 0,
              describe(s), ": bad shape");
  detail::set_nchw(x_, s.n, s.c_in, s.h, s.w);
  detail::set_nchw(y_, s.n, s.c_out, s.h_out, s.w_out);
  detail::set_nchw(bias_, 1, s.c_out, 1, 1);
  CRUMB_CUDNN_CHECK(
      cudnnSetFilter4dDescriptor(w_.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.c_out, s.c_in, s.kh, s.kw));
  // Cross-correlation is what deep-learning frameworks call convolution (no kernel flip).
  CRUMB_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_.get(), s.pad_h, s.pad_w, s.stride_h, s.stride_w, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CRUMB_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), CUDNN_FMA_MATH));

  int n = 0, c = 0, h = 0, w = 0;
  CRUMB_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_.get(), x_.get(), w_.get(), &n, &c, &h, &w));
  CRUMB_CHECK(n == s.n && c == s.c_out && h == s.h_out && w == s.w_out, describe(s), ": output [", s.n, ", ", s.c_out,
              ", ", s.h_out, ", ", s.w_out, "] disagrees with cuDNN's [", n, ", ", c, ", ", h, ", ", w, "]");

  int count = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  CRUMB_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, x_.get(), w_.get(), conv_.get(), y_.get(),
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, fwd));
  fwd_algo_ = pick_algo(
      fwd, count, workspace_limit,
      [&](cudnnConvolutionFwdAlgo_t algo, std::size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(handle, x_.get(), w_.get(), conv_.get(), y_.get(), algo, bytes);
      },
      &fwd_bytes_, "forward", s);

  cudnnConvolutionBwdDataAlgoPerf_t bwd_data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  CRUMB_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      handle, w_.get(), y_.get(), conv_.get(), x_.get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, bwd_data));
  bwd_data_algo_ = pick_algo(
      bwd_data, count, workspace_limit,
      [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, w_.get(), y_.get(), conv_.get(), x_.get(), algo,
                                                            bytes);
      },
      &bwd_data_bytes_, "backward-data", s);

  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  CRUMB_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      handle, x_.get(), y_.get(), conv_.get(), w_.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, bwd_filter));
  bwd_filter_algo_ = pick_algo(
      bwd_filter, count, workspace_limit,
      [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, x_.get(), y_.get(), conv_.get(), w_.get(), algo,
                                                              bytes);
      },
      &bwd_filter_bytes_, "backward-filter", s);
}

void ConvPlan::set_batch(cudnnHandle_t handle, int n) {
  CRUMB_CHECK(n >= 1 && n <= planned_n_, describe(shape_), ": batch ", n, " outside the planned 1..", planned_n_);
  shape_.n = n;
  detail::set_nchw(x_, n, shape_.c_in, shape_.h, shape_.w);
  detail::set_nchw(y_, n, shape_.c_out, shape_.h_out, shape_.w_out);
  // Workspace need is not guaranteed to shrink with the batch, so check it rather than assume it.
  std::size_t fwd = 0, bwd_data = 0, bwd_filter = 0;
  CRUMB_CUDNN_CHECK(
      cudnnGetConvolutionForwardWorkspaceSize(handle, x_.get(), w_.get(), conv_.get(), y_.get(), fwd_algo_, &fwd));
  CRUMB_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle, w_.get(), y_.get(), conv_.get(), x_.get(),
                                                                 bwd_data_algo_, &bwd_data));
  CRUMB_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, x_.get(), y_.get(), conv_.get(), w_.get(),
                                                                   bwd_filter_algo_, &bwd_filter));
  check_workspace(fwd, fwd_bytes_, "forward (planned)", shape_);
  check_workspace(bwd_data, bwd_data_bytes_, "backward-data (planned)", shape_);
  check_workspace(bwd_filter, bwd_filter_bytes_, "backward-filter (planned)", shape_);
}

std::size_t ConvPlan::workspace_bytes(ConvPass pass) const {
  return pass == ConvPass::Forward ? fwd_bytes_ : pass == ConvPass::BackwardData ? bwd_data_bytes_ : bwd_filter_bytes_;
}

std::size_t ConvPlan::workspace_bytes() const { return std::max({fwd_bytes_, bwd_data_bytes_, bwd_filter_bytes_}); }

void conv_forward(cudnnHandle_t handle, const ConvPlan& plan, float* y, const float* x, const float* w, const float* b,
                  void* workspace, std::size_t workspace_bytes) {
  check_workspace(plan.fwd_bytes_, workspace_bytes, "forward", plan.shape_);
  const float one = 1.0f, zero = 0.0f;
  CRUMB_CUDNN_CHECK(cudnnConvolutionForward(handle, &one, plan.x_.get(), x, plan.w_.get(), w, plan.conv_.get(),
                                            plan.fwd_algo_, workspace, workspace_bytes, &zero, plan.y_.get(), y));
  if (b) CRUMB_CUDNN_CHECK(cudnnAddTensor(handle, &one, plan.bias_.get(), b, &one, plan.y_.get(), y));
}

// beta = 0 makes cuDNN ignore the output's old contents (garbage, NaN), as write mode requires.
void conv_backward_data(cudnnHandle_t handle, const ConvPlan& plan, float* dx, const float* dy, const float* w,
                        void* workspace, std::size_t workspace_bytes, bool accumulate) {
  check_workspace(plan.bwd_data_bytes_, workspace_bytes, "backward-data", plan.shape_);
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CRUMB_CUDNN_CHECK(cudnnConvolutionBackwardData(handle, &one, plan.w_.get(), w, plan.y_.get(), dy, plan.conv_.get(),
                                                 plan.bwd_data_algo_, workspace, workspace_bytes, &beta, plan.x_.get(),
                                                 dx));
}

void conv_backward_filter(cudnnHandle_t handle, const ConvPlan& plan, float* dw, float* db, const float* dy,
                          const float* x, void* workspace, std::size_t workspace_bytes, bool accumulate) {
  check_workspace(plan.bwd_filter_bytes_, workspace_bytes, "backward-filter", plan.shape_);
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  CRUMB_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, plan.x_.get(), x, plan.y_.get(), dy, plan.conv_.get(),
                                                   plan.bwd_filter_algo_, workspace, workspace_bytes, &beta,
                                                   plan.w_.get(), dw));
  if (db) CRUMB_CUDNN_CHECK(cudnnConvolutionBackwardBias(handle, &one, plan.y_.get(), dy, &beta, plan.bias_.get(), db));
}

}  // namespace crumb::cuda
