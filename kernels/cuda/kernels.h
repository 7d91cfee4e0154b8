// CUDA kernels: host launchers over device pointers with explicit shapes, the twins of the CPU kernels
// in kernels/cpu/kernels.h (same layouts, same semantics, float only). Each launcher checks its
// preconditions and the launch, throwing crumb::Error, and enqueues on `stream` without synchronising.
// Launchers never allocate: the engine owns all device memory.
// `accumulate` selects the write mode of a gradient output as on the CPU: false writes (=) and never
// reads the output (it may hold garbage, even NaN), true adds (+=), for fused micro-batch accumulation.
// Counts of zero are valid and launch nothing.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/adamw_scalars.h"
#include "kernels/cpu/shapes.h"
#include "kernels/dropout_mask.h"

namespace crumb::cuda {

// ---- elementwise over `count` elements. y may alias x (in place), dx may alias dy.
void relu_forward(float* y, const float* x, std::size_t count, cudaStream_t stream);
// dx (=|+=) dy where y > 0 else 0 (the forward *output*, so the forward may run in place)
void relu_backward(float* dx, const float* dy, const float* y, std::size_t count, bool accumulate, cudaStream_t stream);
// y = a + b (y may alias a or b)
void add_forward(float* y, const float* a, const float* b, std::size_t count, cudaStream_t stream);
// y (=|+=) x
void copy_or_accumulate(float* y, const float* x, std::size_t count, bool accumulate, cudaStream_t stream);

// ---- per-channel bias on y [n, c, hw] (hw = 1 for a linear layer's [n, c])
// y [n, c, hw] += b [c], in place
void bias_add_nchw(float* y, const float* b, int n, int c, int hw, cudaStream_t stream);
// db [c] (=|+=) sum over n and hw of dy [n, c, hw]. One block reduces one channel in a fixed order, so
// the result is deterministic (no atomics).
void bias_backward_nchw(float* db, const float* dy, int n, int c, int hw, bool accumulate, cudaStream_t stream);

// ---- pooling on NCHW: x [n, c, h, w], y [n, c, h_out, w_out] with the floor output size
// h_out = (h + 2 * pad_h - kh) / stride_h + 1 (likewise w_out), padding at most half the window; all
// checked, as in the pooling ops. Padding cells never win a max and count as zeros in the average
// (count_include_pad=True: every window sum is divided by kh * kw). One thread per element, gathers
// only: deterministic, and equal to the CPU kernels bit for bit (the caveat is at avg_pool2d_backward).
// No output may alias an input.
// y and argmax [n, c, h_out, w_out]; kh * kw <= 256. argmax is the row-major offset ki * kw + kj inside
// the window of its first maximum. A NaN wins (of several, the same one as on the CPU).
void max_pool2d_forward(float* y, uint8_t* argmax, const float* x, const cpu::Pool2dShape& s, cudaStream_t stream);
// dx [n, c, h, w] (=|+=) dy [n, c, h_out, w_out] routed to the cells argmax points at (overlapping windows
// may route several to one cell).
void max_pool2d_backward(float* dx, const float* dy, const uint8_t* argmax, const cpu::Pool2dShape& s, bool accumulate,
                         cudaStream_t stream);
// y = window sums of x / (kh * kw)
void avg_pool2d_forward(float* y, const float* x, const cpu::Pool2dShape& s, cudaStream_t stream);
// dx (=|+=) the sum of dy / (kh * kw) over the windows covering each cell. The product and add are fused
// (fma), as GCC compiles the CPU kernel for targets with FMA; against a CPU build without it the results
// differ in rounding.
void avg_pool2d_backward(float* dx, const float* dy, const cpu::Pool2dShape& s, bool accumulate, cudaStream_t stream);

// *count (device memory) = elements of x that are NaN or infinite (divergence detection).
void count_nonfinite(unsigned long long* count, const float* x, std::size_t n, cudaStream_t stream);

// ---- global average pool: x [n, c, hw] -> y [n, c]
void global_avg_pool_forward(float* y, const float* x, int n, int c, int hw, cudaStream_t stream);
// dx [n, c, hw] (=|+=) dy [n, c] / hw
void global_avg_pool_backward(float* dx, const float* dy, int n, int c, int hw, bool accumulate, cudaStream_t stream);
// ---- adaptive average pool (PyTorch's bins, kernels/cpu/shapes.h); one thread per element, gathers in
// the CPU's order, so both devices agree bit for bit. No output may alias an input.
void adaptive_avg_pool2d_forward(float* y, const float* x, const cpu::AdaptivePool2dShape& s, cudaStream_t stream);
void adaptive_avg_pool2d_backward(float* dx, const float* dy, const cpu::AdaptivePool2dShape& s, bool accumulate,
                                  cudaStream_t stream);

// ---- dropout: the CPU's map (kernels/cpu/kernels.h) with the same mask; *key is in device memory. y may
// alias x.
void dropout(float* y, const float* x, int n, std::size_t per_sample, const RandomKey* key, uint64_t layer,
             uint32_t threshold, float scale, bool accumulate, cudaStream_t stream);

// ---- normalisation on NCHW: the semantics and layouts of the CPU twins (kernels/cpu/kernels.h):
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

// ---- softmax cross-entropy over logits [n, k] with int32 labels [n] in [0, k) (not checked on the device).
// Writes probs [n, k] and *adds* to two device counters, which the caller zeroes once per step so that
// all micro-batches of a step accumulate on the device and are read back with one copy:
//   *loss_sum_dev += sum over rows of -log p[label] (max-subtracted log-sum-exp, added in double);
//   *correct_dev  += rows whose first maximum of probs is the label (the CPU's count_correct).
// Rows are summed with atomics, so the loss sum's rounding may vary between runs (in the last bits of a
// double); the probs and the count are deterministic.
void softmax_xent_forward(float* probs, const float* logits, const int32_t* labels, int n, int k, double* loss_sum_dev,
                          unsigned long long* correct_dev, cudaStream_t stream);
// dlogits [n, k] (=|+=) scale * (probs - onehot(labels)). scale is 1/B for a batch of B samples.
void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* labels, int n, int k, float scale,
                           bool accumulate, cudaStream_t stream);

// ---- optimizers: one launch over the engine's flat parameter block, so each is the multi-tensor step.
// The same semantics and layouts as the CPU twins in kernels/cpu/kernels.h.
void sgd_momentum_step(float* params, const float* grads, float* momentum_buf, std::size_t count, float lr,
                       float momentum, float weight_decay, bool nesterov, bool first_step, cudaStream_t stream);
void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t count,
                const AdamWScalars& s, cudaStream_t stream);

}  // namespace crumb::cuda
