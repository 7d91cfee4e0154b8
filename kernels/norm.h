// Normalisation kernels (BatchNorm, GroupNorm): the CPU's (crumb::cpu, kernels/cpu/norm.cc) and their CUDA twins
// (crumb::cuda, kernels/cuda/norm.cu). The conventions of every CPU kernel (raw pointers, explicit shapes, no
// allocation, write modes, float and double) are in docs/architecture.md, Kernels; those of every CUDA launcher (device
// pointers, the CPU twin's semantics, checked preconditions, asynchronous on `stream`, no allocation) in docs/cuda.md.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/shapes.h"
#include "kernels/half.h"
#include "kernels/host_device.h"

namespace crumb {

// What a fused normalisation does around its affine map (engine/ops/norm_fused.cc). Forward: y =
// relu(norm(x) + residual), each part optional, rounded to T after each part as the separate ops round, so
// a fused op computes the bits of the chain it replaces. Backward: the gradient given is that of the ReLU's
// output y, and it passes where y > 0 (ReLU's backward, folded in: no separate tensor), read from the
// forward's output as ReLU's own backward reads it: y > 0 exactly where the pre-activation was (NaN fails
// both), so the mask is the forward's, and neither the residual nor the affine map is needed for it. The
// masked gradient, which is also the residual's, is written to dresidual when given (it may alias dy).
template <class T> struct NormEpilogue {
  const T* residual = nullptr;  // shaped and laid out like x; null: none
  bool relu = false;
};
template <class T> struct NormReluGrad {
  const T* y = nullptr;    // the fused forward's output, shaped and laid out like x; null: no ReLU
  T* dresidual = nullptr;  // null: not wanted (BatchNorm on the CPU: given wherever a residual is)
};

}  // namespace crumb

namespace crumb::cpu {

// ---- normalisation (NCHW). Statistics are accumulated in double, with the variance from the mean's
// deviations (two passes), never E[x^2] - E[x]^2. invstd = 1 / sqrt(var + eps) with the biased var.
// `stats` holds, per normalisation group, its mean and invstd: BatchNorm [groups][2][c] (means, then
// invstds), GroupNorm [n][2][groups]. The activations (x, y, dy, dx) are of storage type T; the
// parameters, their gradients and all statistics are Arith<T> (kernels/half.h): float32 for the 16-bit
// types, as mixed precision keeps them.
//
// BatchNorm, training: normalises with each group's statistics and writes them to stats. The running
// statistics follow one of two rules. moments != null (deferred): each group's (count, mean, M2) per
// channel is merged into moments [3][c] with Chan's parallel formula, in group order, so after all groups
// of a batch it holds the whole batch's count, mean and M2 whatever the grouping into calls; commit them
// with batch_norm_commit. running_mean != null (per-group): each group updates running_mean/var with
// momentum (unbiased var) and adds 1 to *tracked, as PyTorch does once per forward.
template <class T>
void batch_norm_forward_train(T* y, Arith<T>* stats, const T* x, const Arith<T>* w, const Arith<T>* b,
                              const BatchNormShape& s, double eps, double* moments, Arith<T>* running_mean,
                              Arith<T>* running_var, int64_t* tracked, double momentum,
                              const NormEpilogue<T>& epilogue = {});
// The training forward's output again from the statistics it wrote (identical bits): what a recomputation
// of a BatchNorm layer in the backward pass runs (engine/strategy/recompute.h).
template <class T>
void batch_norm_apply(T* y, const T* x, const Arith<T>* w, const Arith<T>* b, const Arith<T>* stats,
                      const BatchNormShape& s, const NormEpilogue<T>& epilogue = {});
// One momentum update of the running statistics from the merged moments of a batch (unbiased variance
// M2 / (count - 1); 0 when a channel saw one value), and *tracked += 1.
template <class T>
void batch_norm_commit(T* running_mean, T* running_var, int64_t* tracked, const double* moments, int c, double momentum);
// BatchNorm with the running statistics (evaluation, or a frozen layer in training). stats (may be null)
// receives running_mean and 1 / sqrt(running_var + eps) for every group, for the backward.
template <class T>
void batch_norm_forward_frozen(T* y, Arith<T>* stats, const T* x, const Arith<T>* w, const Arith<T>* b,
                               const Arith<T>* running_mean, const Arith<T>* running_var, const BatchNormShape& s,
                               double eps, const NormEpilogue<T>& epilogue = {});
// dw, db (=|+=) sum of dy * xhat, sum of dy per channel; dx (= always; may be null; may be dy itself) the
// gradient through the group statistics (batch_stats) or through the affine map alone (a frozen layer).
template <class T>
void batch_norm_backward(Arith<T>* dw, Arith<T>* db, T* dx, const T* dy, const T* x, const Arith<T>* w,
                         const Arith<T>* stats, const BatchNormShape& s, bool batch_stats, bool accumulate,
                         const NormReluGrad<T>& relu = {});

// GroupNorm (same in training and evaluation).
template <class T>
void group_norm_forward(T* y, Arith<T>* stats, const T* x, const Arith<T>* w, const Arith<T>* b,
                        const GroupNormShape& s, double eps, const NormEpilogue<T>& epilogue = {});
template <class T>
void group_norm_backward(Arith<T>* dw, Arith<T>* db, T* dx, const T* dy, const T* x, const Arith<T>* w,
                         const Arith<T>* stats, const GroupNormShape& s, bool accumulate,
                         const NormReluGrad<T>& relu = {});

}  // namespace crumb::cpu

namespace crumb::cuda {

// ---- normalisation on NCHW (BatchNorm also on NHWC, the shape's layout): the semantics and layouts of
// the CPU twins (above), the fused epilogues (NormEpilogue, NormReluGrad) included:
// statistics in double, stats per group [groups][2][c] (BatchNorm) or [n][2][groups] (GroupNorm), moments
// [3][c] in double. Results are deterministic: no atomics, every sum in a fixed order. GroupNorm: one
// block per (sample, group) row, two passes (the mean, then the squared deviations), and one block per
// channel for dw, db. BatchNorm splits each (group, channel) into ranges of a size fixed by the shape,
// one block each (two passes over its range for the statistics), whose partial sums go to the workspace
// and are combined by one thread per channel in range order (Chan et al.'s merge of (count, mean, M2) for
// the statistics), visiting the groups in order; the running statistics, *tracked and moments are updated
// there, on the device. No output may alias an input, but for three: a fused backward's residual gradient
// may take dy's storage, so may a fused BatchNorm backward's dx where it has no residual gradient, and
// batch_norm_apply's y x's (each value is read before the same thread writes it). The activations (x, y, dy, dx) are of storage type
// T: float, bf16 or f16 (kernels/half.h), loaded as float; everything else is float32 (moments double)
// for every T, as mixed precision keeps normalisation parameters, their gradients and statistics.
// BatchNorm, training: deferred (moments != null: each group Chan-merged into moments in group order) or
// per group (running_mean/var != null: a momentum update per group, unbiased var, and *tracked += the
// groups); s.group 0 is valid only for n == 0. workspace: at least
// batch_norm_forward_train_workspace(s) bytes of device scratch, 8-byte aligned.
std::size_t batch_norm_forward_train_workspace(const cpu::BatchNormShape& s);
template <class T>
void batch_norm_forward_train(T* y, float* stats, const T* x, const float* w, const float* b,
                              const cpu::BatchNormShape& s, double eps, double* moments, float* running_mean,
                              float* running_var, int64_t* tracked, double momentum, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream, const NormEpilogue<T>& epilogue = {});
// The training forward's output again from the statistics it stored (identical bits; a recomputation).
template <class T>
void batch_norm_apply(T* y, const T* x, const float* w, const float* b, const float* stats,
                      const cpu::BatchNormShape& s, cudaStream_t stream, const NormEpilogue<T>& epilogue = {});
// One momentum update from a batch's merged moments, and *tracked += 1 (also for c == 0).
void batch_norm_commit(float* running_mean, float* running_var, int64_t* tracked, const double* moments, int c,
                       double momentum, cudaStream_t stream);
// Normalises with the running statistics; stats (may be null) receives them for every group.
template <class T>
void batch_norm_forward_frozen(T* y, float* stats, const T* x, const float* w, const float* b,
                               const float* running_mean, const float* running_var, const cpu::BatchNormShape& s,
                               double eps, cudaStream_t stream, const NormEpilogue<T>& epilogue = {});
// dw, db (=|+=) per channel; dx (= always; may be null) through the group statistics (batch_stats) or the
// affine map alone. workspace: at least batch_norm_backward_workspace(s) bytes, 8-byte aligned.
std::size_t batch_norm_backward_workspace(const cpu::BatchNormShape& s);
template <class T>
void batch_norm_backward(float* dw, float* db, T* dx, const T* dy, const T* x, const float* w,
                         const float* stats, const cpu::BatchNormShape& s, bool batch_stats, bool accumulate,
                         void* workspace, std::size_t workspace_bytes, cudaStream_t stream,
                         const NormReluGrad<T>& relu = {});
template <class T>
void group_norm_forward(T* y, float* stats, const T* x, const float* w, const float* b,
                        const cpu::GroupNormShape& s, double eps, cudaStream_t stream,
                        const NormEpilogue<T>& epilogue = {});
// dw, db (=|+=); dx (= always; may be null).
template <class T>
void group_norm_backward(float* dw, float* db, T* dx, const T* dy, const T* x, const float* w,
                         const float* stats, const cpu::GroupNormShape& s, bool accumulate, cudaStream_t stream,
                         const NormReluGrad<T>& relu = {});

}  // namespace crumb::cuda
