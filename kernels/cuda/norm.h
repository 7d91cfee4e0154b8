// CUDA normalisation kernels (BatchNorm, GroupNorm). The conventions of every CUDA launcher (device pointers, the CPU
// twin's semantics, checked preconditions, asynchronous on `stream`, no allocation) are in docs/cuda.md.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/shapes.h"

namespace crumb::cuda {

// ---- normalisation on NCHW: the semantics and layouts of the CPU twins (kernels/cpu/norm.h):
// statistics in double from the mean's deviations (two passes), stats per group [groups][2][c]
// (BatchNorm) or [n][2][groups] (GroupNorm), moments [3][c] in double. Every sum is one block's
// fixed-order reduction (one block per BatchNorm channel, visiting its groups in order; one per GroupNorm
// (sample, group) row, and one per channel for its dw, db), so results are deterministic. The running
// statistics, *tracked and moments are read and updated on the device, by one thread each. No output
// may alias an input.
// BatchNorm, training: deferred (moments != null: each group Chan-merged into moments in group order) or
// per group (running_mean/var != null: a momentum update per group, unbiased var, and *tracked += the
// groups); s.group 0 is valid only for n == 0.
void batch_norm_forward_train(float* y, float* stats, const float* x, const float* w, const float* b,
                              const cpu::BatchNormShape& s, double eps, double* moments, float* running_mean,
                              float* running_var, int64_t* tracked, double momentum, cudaStream_t stream);
// The training forward's output again from the statistics it stored (identical bits; a recomputation).
void batch_norm_apply(float* y, const float* x, const float* w, const float* b, const float* stats,
                      const cpu::BatchNormShape& s, cudaStream_t stream);
// One momentum update from a batch's merged moments, and *tracked += 1 (also for c == 0).
void batch_norm_commit(float* running_mean, float* running_var, int64_t* tracked, const double* moments, int c,
                       double momentum, cudaStream_t stream);
// Normalises with the running statistics; stats (may be null) receives them for every group.
void batch_norm_forward_frozen(float* y, float* stats, const float* x, const float* w, const float* b,
                               const float* running_mean, const float* running_var, const cpu::BatchNormShape& s,
                               double eps, cudaStream_t stream);
// dw, db (=|+=) per channel; dx (= always; may be null) through the group statistics (batch_stats) or the
// affine map alone.
void batch_norm_backward(float* dw, float* db, float* dx, const float* dy, const float* x, const float* w,
                         const float* stats, const cpu::BatchNormShape& s, bool batch_stats, bool accumulate,
                         cudaStream_t stream);
void group_norm_forward(float* y, float* stats, const float* x, const float* w, const float* b,
                        const cpu::GroupNormShape& s, double eps, cudaStream_t stream);
// dw, db (=|+=); dx (= always; may be null).
void group_norm_backward(float* dw, float* db, float* dx, const float* dy, const float* x, const float* w,
                         const float* stats, const cpu::GroupNormShape& s, bool accumulate, cudaStream_t stream);

}  // namespace crumb::cuda
