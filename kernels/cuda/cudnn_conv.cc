#include "kernels/cuda/cudnn_conv.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "engine/base/error.h"
#include "kernels/cuda/check.h"
#include "kernels/convert.h"
#include "kernels/elementwise.h"

namespace crumb::cuda {
namespace {

std::string describe(const cpu::Conv2dShape& s) {
  return crumb::detail::concat("conv2d x [", s.n, ", ", s.c_in, ", ", s.h, ", ", s.w, "] w [", s.c_out, ", ",
                               s.c_in / s.groups, ", ", s.kh, ", ", s.kw, "] stride ", s.stride_h, "x", s.stride_w,
                               " pad ", s.pad_h, "x", s.pad_w, s.groups > 1 ? " groups " : "",
                               s.groups > 1 ? std::to_string(s.groups) : "");
}

const char* pass_name(ConvPass pass) {
  return pass == ConvPass::Forward ? "forward" : pass == ConvPass::BackwardData ? "backward-data" : "backward-filter";
}

// Where the algorithm's workspace starts after a restaged dw: cuDNN wants its workspace aligned.
constexpr std::size_t kWorkspaceAlign = 256;

DType dtype_of(cudnnDataType_t t) {
  return t == CUDNN_DATA_BFLOAT16 ? DType::BF16 : t == CUDNN_DATA_HALF ? DType::F16 : DType::F32;
}

cudaStream_t stream_of(cudnnHandle_t handle) {
  cudaStream_t stream = nullptr;
  CRUMB_CUDNN_CHECK(cudnnGetStream(handle, &stream));
  return stream;
}

// cuDNN 9 refines NOT_SUPPORTED into sub-codes 3001, 3002, ...: any of them means "try another algorithm".
bool not_supported(cudnnStatus_t status) { return status / 1000 == CUDNN_STATUS_NOT_SUPPORTED / 1000; }

// cuDNN's ranked results that ran, in the math allowed (and deterministic where asked). Without tensor
// ops only CUDNN_FMA_MATH: CUDNN_DEFAULT_MATH may use TF32 on sm_80 and newer (PyTorch asserts FMA too).
template <class Perf>
void append_ranked(const Perf* perf, int count, bool tensor_ops, bool deterministic,
                   std::vector<std::pair<int, cudnnMathType_t>>* out) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && (tensor_ops || perf[i].mathType == CUDNN_FMA_MATH) &&
        (!deterministic || perf[i].determinism == CUDNN_DETERMINISTIC))
      out->emplace_back(static_cast<int>(perf[i].algo), perf[i].mathType);
}

// y's (or dy's) shape for the bias kernels, which index [n, c, hw]: NHWC memory is [n * hw, c, 1].
struct BiasShape {
  int n, c, hw;
};
BiasShape bias_shape(const ConvPlan& plan) {
  const cpu::Conv2dShape& s = plan.shape();
  const int64_t hw = static_cast<int64_t>(s.h_out) * s.w_out;
  if (plan.layout() == Layout::NCHW) return {s.n, s.c_out, static_cast<int>(hw)};
  CRUMB_CHECK(s.n * hw <= INT32_MAX, describe(s), ": more than 2^31 output positions for the bias kernels");
  return {static_cast<int>(s.n * hw), s.c_out, 1};
}

void check_workspace(std::size_t need, std::size_t have, ConvPass pass, const cpu::Conv2dShape& s) {
  CRUMB_CHECK(have >= need, describe(s), ": the ", pass_name(pass), " pass needs ", need, " bytes of workspace, got ",
              have);
}

}  // namespace

ConvPlan::ConvPlan(cudnnHandle_t handle, const cpu::Conv2dShape& s, ConvPass pass, std::size_t workspace_limit,
                   bool tf32, cudnnDataType_t dtype, Layout layout, Layout filter_layout, bool deterministic)
    : shape_(s), pass_(pass), dtype_(dtype), layout_(layout), planned_n_(s.n) {
  CRUMB_CHECK(s.n >= 1 && s.c_in >= 1 && s.h >= 1 && s.w >= 1 && s.c_out >= 1 && s.kh >= 1 && s.kw >= 1 &&
                  s.stride_h >= 1 && s.stride_w >= 1 && s.pad_h >= 0 && s.pad_w >= 0 && s.groups >= 1 &&
                  s.c_in % s.groups == 0 && s.c_out % s.groups == 0,
              describe(s), ": bad shape");
  const int c_group = s.c_in / s.groups;  // the filter's input channels
  CRUMB_CHECK(dtype == CUDNN_DATA_FLOAT || dtype == CUDNN_DATA_BFLOAT16 || dtype == CUDNN_DATA_HALF, describe(s),
              ": storage type must be float, bfloat16 or half");
  // Tensor cores: TF32 for float when allowed; always for 16-bit operands, which they read as they are.
  const bool tensor_ops = tf32 || dtype != CUDNN_DATA_FLOAT;
  detail::set_image(x_, s.n, s.c_in, s.h, s.w, dtype, layout);
  detail::set_image(y_, s.n, s.c_out, s.h_out, s.w_out, dtype, layout);
  detail::set_image(bias_, 1, s.c_out, 1, 1, dtype);
  if (pass == ConvPass::BackwardFilter && layout == Layout::NHWC && filter_layout == Layout::NCHW) {
    const std::size_t bytes = static_cast<std::size_t>(s.c_out) * c_group * s.kh * s.kw * dtype_size(dtype_of(dtype));
    restage_bytes_ = (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
    filter_layout = Layout::NHWC;
  }
  CRUMB_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_.get(), dtype, detail::format_of(filter_layout), s.c_out, c_group,
                                               s.kh, s.kw));
  // Cross-correlation is what deep-learning frameworks call convolution (no kernel flip). The compute
  // type is float for every storage type: 16-bit products accumulate in float32.
  CRUMB_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_.get(), s.pad_h, s.pad_w, s.stride_h, s.stride_w, 1, 1,
                                                    CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CRUMB_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_.get(), s.groups));
  CRUMB_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), tensor_ops ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));

  int n = 0, c = 0, h = 0, w = 0;
  CRUMB_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_.get(), x_.get(), w_.get(), &n, &c, &h, &w));
  CRUMB_CHECK(n == s.n && c == s.c_out && h == s.h_out && w == s.w_out, describe(s), ": output [", s.n, ", ", s.c_out,
              ", ", s.h_out, ", ", s.w_out, "] disagrees with cuDNN's [", n, ", ", c, ", ", h, ", ", w, "]");

  std::vector<std::pair<int, cudnnMathType_t>> ranked;
  int count = 0;
  if (pass == ConvPass::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CRUMB_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, x_.get(), w_.get(), conv_.get(), y_.get(),
                                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
    append_ranked(perf, count, tensor_ops, deterministic, &ranked);
  } else if (pass == ConvPass::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CRUMB_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        handle, w_.get(), y_.get(), conv_.get(), x_.get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
    append_ranked(perf, count, tensor_ops, deterministic, &ranked);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CRUMB_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        handle, x_.get(), y_.get(), conv_.get(), w_.get(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
    append_ranked(perf, count, tensor_ops, deterministic, &ranked);
  }
  for (const auto& [algo, math] : ranked) {
    const Candidate cand{algo, math};
    std::size_t bytes = 0;
    if (workspace_of(handle, cand, &bytes) != CUDNN_STATUS_SUCCESS || bytes > workspace_limit) continue;
    if (candidates_.empty()) workspace_ = bytes;
    candidates_.push_back(cand);
  }
  CRUMB_CHECK(!candidates_.empty(), describe(s), ": no ", deterministic ? "deterministic " : "", "cuDNN ",
              pass_name(pass), " algorithm in ", dtype != CUDNN_DATA_FLOAT ? "16-bit" : tf32 ? "FP32/TF32" : "FP32",
              " for these layouts within the workspace limit of ", workspace_limit, " bytes (cuDNN ranked ", count,
              ", of which ", ranked.size(), " are supported in that math",
              ranked.empty() ? ": try --tf32 or --channels-last off)" : "; raise the limit)");
  pick(handle);
}

cudnnStatus_t ConvPlan::workspace_of(cudnnHandle_t handle, const Candidate& c, std::size_t* bytes) const {
  // The math type is part of what the workspace query (and the run) sees.
  const cudnnStatus_t math = cudnnSetConvolutionMathType(conv_.get(), c.math);
  if (math != CUDNN_STATUS_SUCCESS) return math;
  switch (pass_) {
    case ConvPass::Forward:
      return cudnnGetConvolutionForwardWorkspaceSize(handle, x_.get(), w_.get(), conv_.get(), y_.get(),
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), bytes);
    case ConvPass::BackwardData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, w_.get(), y_.get(), conv_.get(), x_.get(),
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), bytes);
    case ConvPass::BackwardFilter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(
          handle, x_.get(), y_.get(), conv_.get(), w_.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo),
          bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

void ConvPlan::pick(cudnnHandle_t handle) {
  for (const auto& [n, cand] : picked_) {
    if (n == shape_.n) {
      current_ = cand;
      CRUMB_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_.get(), current_.math));
      return;
    }
  }
  for (const Candidate& cand : candidates_) {
    std::size_t bytes = 0;
    if (workspace_of(handle, cand, &bytes) == CUDNN_STATUS_SUCCESS && bytes <= workspace_) {
      current_ = cand;  // workspace_of left the descriptor in this candidate's math
      picked_.emplace_back(shape_.n, cand);
      return;
    }
  }
  CRUMB_FAIL(describe(shape_), ": no ", pass_name(pass_), " algorithm of the ", candidates_.size(),
             " planned fits the planned workspace of ", workspace_, " bytes at this batch");
}

void ConvPlan::set_batch(cudnnHandle_t handle, int n) {
  CRUMB_CHECK(n >= 1 && n <= planned_n_, describe(shape_), ": batch ", n, " outside the planned 1..", planned_n_);
  shape_.n = n;
  detail::set_image(x_, n, shape_.c_in, shape_.h, shape_.w, dtype_, layout_);
  detail::set_image(y_, n, shape_.c_out, shape_.h_out, shape_.w_out, dtype_, layout_);
  pick(handle);
}

template <class Call>
void ConvPlan::run(cudnnHandle_t handle, std::size_t workspace_bytes, const char* what, Call call) {
  check_workspace(workspace_, workspace_bytes, pass_, shape_);
  for (;;) {
    const cudnnStatus_t status = call(current_.algo);
    if (!not_supported(status) || candidates_.size() == 1) {
      check_cudnn(status, what, __FILE__, __LINE__);
      return;
    }
    // Refused before any work: drop it for every batch and take the next that fits.
    const Candidate refused = current_;
    auto same = [&](const Candidate& c) { return c.algo == refused.algo && c.math == refused.math; };
    candidates_.erase(std::remove_if(candidates_.begin(), candidates_.end(), same), candidates_.end());
    picked_.clear();
    pick(handle);
  }
}

// The scaling factors are float for every storage type but double (cuDNN's rule).
void conv_forward(cudnnHandle_t handle, ConvPlan& plan, void* y, const void* x, const void* w, const void* b,
                  void* workspace, std::size_t workspace_bytes) {
  const float one = 1.0f, zero = 0.0f;
  plan.run(handle, workspace_bytes, "cudnnConvolutionForward", [&](int algo) {
    return cudnnConvolutionForward(handle, &one, plan.x_.get(), x, plan.w_.get(), w, plan.conv_.get(),
                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace, workspace_bytes, &zero,
                                   plan.y_.get(), y);
  });
  if (!b) return;
  if (plan.dtype_ == CUDNN_DATA_FLOAT) {
    CRUMB_CUDNN_CHECK(cudnnAddTensor(handle, &one, plan.bias_.get(), b, &one, plan.y_.get(), y));
    return;
  }
  // A 16-bit bias is added by Crumb's own kernel (float32 add, one rounding), which cudnnAddTensor is not
  // documented to do for bf16; on NHWC memory as [n * h * w, c] rows.
  const BiasShape bs = bias_shape(plan);
  const cudaStream_t stream = stream_of(handle);
  if (plan.dtype_ == CUDNN_DATA_BFLOAT16) {
    bias_add_nchw(static_cast<bf16*>(y), static_cast<const bf16*>(b), bs.n, bs.c, bs.hw, stream);
  } else {
    bias_add_nchw(static_cast<f16*>(y), static_cast<const f16*>(b), bs.n, bs.c, bs.hw, stream);
  }
}

// beta = 0 makes cuDNN ignore the output's old contents (garbage, NaN), as write mode requires.
void conv_backward_data(cudnnHandle_t handle, ConvPlan& plan, void* dx, const void* dy, const void* w,
                        void* workspace, std::size_t workspace_bytes, bool accumulate) {
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  plan.run(handle, workspace_bytes, "cudnnConvolutionBackwardData", [&](int algo) {
    return cudnnConvolutionBackwardData(handle, &one, plan.w_.get(), w, plan.y_.get(), dy, plan.conv_.get(),
                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), workspace, workspace_bytes,
                                        &beta, plan.x_.get(), dx);
  });
}

void conv_backward_filter(cudnnHandle_t handle, ConvPlan& plan, void* dw, void* db, const void* dy, const void* x,
                          void* workspace, std::size_t workspace_bytes, bool accumulate) {
  const float one = 1.0f, zero = 0.0f, beta = accumulate ? 1.0f : 0.0f;
  const std::size_t restage = plan.restage_bytes_;
  CRUMB_CHECK(workspace_bytes >= restage, describe(plan.shape_), ": the backward-filter pass needs ", restage,
              " bytes of workspace for dw in NHWC and the algorithm's after them, got ", workspace_bytes);
  void* out = restage ? workspace : dw;
  void* algo_workspace = static_cast<char*>(workspace) + restage;
  plan.run(handle, workspace_bytes - restage, "cudnnConvolutionBackwardFilter", [&](int algo) {
    return cudnnConvolutionBackwardFilter(handle, &one, plan.x_.get(), x, plan.y_.get(), dy, plan.conv_.get(),
                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), algo_workspace,
                                          workspace_bytes - restage, restage ? &zero : &beta, plan.w_.get(), out);
  });
  if (restage) {
    const cpu::Conv2dShape& s = plan.shape_;
    const DType t = dtype_of(plan.dtype_);
    relayout(dw, t, out, t, ImageShape{s.c_out, s.c_in / s.groups, static_cast<int64_t>(s.kh) * s.kw}, Layout::NCHW,
             accumulate, stream_of(handle));
  }
  if (db) CRUMB_CUDNN_CHECK(cudnnConvolutionBackwardBias(handle, &one, plan.y_.get(), dy, &beta, plan.bias_.get(), db));
}

}  // namespace crumb::cuda
