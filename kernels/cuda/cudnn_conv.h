// conv2d on cuDNN (NCHW; shapes and write modes as the CPU twins in kernels/conv2d.h):
// x [n, c_in, h, w], w [c_out, c_in / groups, kh, kw] (cuDNN's group count), b [c_out],
// y [n, c_out, h_out, w_out], all of the plan's storage type: float, or bf16 / f16 (kernels/half.h)
// computed in float32 (cuDNN's PSEUDO_BFLOAT16 and PSEUDO_HALF configurations) on tensor cores. cuDNN's
// legacy API writes a weight gradient of the operands' type only, so a 16-bit backward-filter plan's dw
// and db are 16-bit too.
// The handle carries the stream (cudnnSetStream, set once by the engine).
// Uses cuDNN's legacy convolution API (deprecated in cuDNN 9, still complete there), which needs no
// graph building: a plan is a handful of descriptors and a ranked list of algorithm ids.
#pragma once
#include <cudnn.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "kernels/cpu/shapes.h"
#include "kernels/cuda/cudnn_descriptors.h"

namespace crumb::cuda {

enum class ConvPass { Forward, BackwardData, BackwardFilter };

// One pass of one conv2d layer (a graph node runs exactly one pass), built once for its largest
// micro-batch. Candidates come from cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7), in its order
// of expected speed, keeping those that run in the allowed math and whose workspace at the planned batch
// fits the limit; the first one's workspace is the plan's, fixed for its lifetime because the engine
// plans it into the arena. At any batch the plan runs the first candidate whose workspace there fits the
// plan's (cuDNN does not promise that a smaller batch needs less), and a candidate that cuDNN refuses
// at run time (NOT_SUPPORTED) is dropped for the next. With tf32 off, math is FP32 FMA only, so results
// match the CPU to float rounding; with it on, tensor-op (TF32) candidates are allowed too. A 16-bit plan
// allows every math cuDNN offers for it: its tensor-op candidates are the fast ones. deterministic keeps
// only the algorithms cuDNN reports as giving the same bits on every run (no atomics).
class ConvPlan {
 public:
  // shape.n is the largest micro-batch. Throws if the pass has no algorithm within workspace_limit bytes.
  // layout is x's and y's (and dx's and dy's); filter_layout the filter's (or dw's): NHWC filters are
  // [K, R, S, C]. cuDNN's tensor-core engines want both NHWC (engine/plan/layout.h); its backward-filter
  // algorithms refuse NHWC x and dy with an NCHW dw, which the plan therefore writes NHWC and moves.
  ConvPlan(cudnnHandle_t handle, const cpu::Conv2dShape& shape, ConvPass pass, std::size_t workspace_limit,
           bool tf32 = false, cudnnDataType_t dtype = CUDNN_DATA_FLOAT, Layout layout = Layout::NCHW,
           Layout filter_layout = Layout::NCHW, bool deterministic = false);

  // Re-targets the plan to n samples, 1 <= n <= the planned batch (the ragged last micro-batch; also back
  // to the full batch). Re-sets the x/y descriptors and picks the algorithm for n (remembered per n), which
  // allocates no device memory and does no device work.
  void set_batch(cudnnHandle_t handle, int n);

  // The current shape (n as last set).
  const cpu::Conv2dShape& shape() const { return shape_; }
  ConvPass pass() const { return pass_; }
  cudnnDataType_t dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  // Workspace bytes the pass needs at any batch up to the planned one.
  std::size_t workspace_bytes() const { return restage_bytes_ + workspace_; }
  // The algorithm (cuDNN's enum value for the pass) the next run uses.
  int algorithm() const { return current_.algo; }

 private:
  struct Candidate {
    int algo;
    cudnnMathType_t math;
  };
  friend void conv_forward(cudnnHandle_t, ConvPlan&, void*, const void*, const void*, const void*, void*,
                           std::size_t);
  friend void conv_backward_data(cudnnHandle_t, ConvPlan&, void*, const void*, const void*, void*, std::size_t, bool);
  friend void conv_backward_filter(cudnnHandle_t, ConvPlan&, void*, void*, const void*, const void*, void*,
                                   std::size_t, bool);

  // cuDNN's workspace query for this pass with candidate c at the current descriptors.
  cudnnStatus_t workspace_of(cudnnHandle_t handle, const Candidate& c, std::size_t* bytes) const;
  // The first candidate whose workspace at the current batch fits workspace_; sets the descriptor's math.
  void pick(cudnnHandle_t handle);
  // Runs `call(algo)` for the current candidate, dropping candidates cuDNN refuses as not supported.
  template <class Call> void run(cudnnHandle_t handle, std::size_t workspace_bytes, const char* what, Call call);

  cpu::Conv2dShape shape_;
  ConvPass pass_;
  cudnnDataType_t dtype_;
  Layout layout_;
  int planned_n_;
  detail::TensorDescriptor x_, y_, bias_;  // x and y double as dx and dy
  detail::FilterDescriptor w_;             // doubles as dw
  detail::ConvolutionDescriptor conv_;
  std::vector<Candidate> candidates_;
  std::size_t workspace_ = 0;
  // An NHWC backward-filter pass whose dw is NCHW: cuDNN's algorithms take x, dy and dw in one layout, so
  // dw is written [K, R, S, C] into the workspace's first restage_bytes_, then moved (or added) to NCHW.
  std::size_t restage_bytes_ = 0;
  Candidate current_{};
  std::vector<std::pair<int, Candidate>> picked_;  // batch -> candidate, so revisiting a batch queries nothing
};

// Every array is of the plan's storage type (dtype()).
// y = conv(x, w) + b (b may be null). workspace: device scratch of workspace_bytes >= plan.workspace_bytes().
void conv_forward(cudnnHandle_t handle, ConvPlan& plan, void* y, const void* x, const void* w, const void* b,
                  void* workspace, std::size_t workspace_bytes);
// dx (=|+=) conv-transpose of dy with w
void conv_backward_data(cudnnHandle_t handle, ConvPlan& plan, void* dx, const void* dy, const void* w,
                        void* workspace, std::size_t workspace_bytes, bool accumulate);
// dw (=|+=) correlation of x with dy; db (=|+=) sum of dy over n, h, w (db may be null)
void conv_backward_filter(cudnnHandle_t handle, ConvPlan& plan, void* dw, void* db, const void* dy, const void* x,
                          void* workspace, std::size_t workspace_bytes, bool accumulate);

}  // namespace crumb::cuda
