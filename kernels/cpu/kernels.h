// CPU kernels: plain functions over raw pointers with explicit shapes (the llm.c way).
// Kernels never allocate: scratch space comes from the caller as `workspace` sized by the matching
// *_workspace() function. T is float (training) or double (gradient checks).
// `accumulate` selects the write mode of a gradient output: false writes (=), true adds (+=). This is
// what fused micro-batch accumulation needs: the first micro-batch writes, later ones add in place.
// Threading: kernels may use OpenMP / Eigen threads; the thread count is set once by the caller.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/adamw_scalars.h"
#include "kernels/cpu/shapes.h"
#include "kernels/dropout_mask.h"

namespace crumb::cpu {

// ---- linear: x [n, in], w [out, in] (PyTorch layout), b [out] (may be null), y [n, out]
template <class T> void linear_forward(T* y, const T* x, const T* w, const T* b, int n, int in, int out);
// dx [n, in] (=|+=) dy [n, out] * w [out, in]
template <class T>
void linear_backward_data(T* dx, const T* dy, const T* w, int n, int in, int out, bool accumulate);
// dw [out, in] (=|+=) dy^T x; db [out] (=|+=) sum over n of dy (db may be null)
template <class T>
void linear_backward_weight(T* dw, T* db, const T* dy, const T* x, int n, int in, int out, bool accumulate);

// ---- conv2d (NCHW), w [c_out, c_in, kh, kw], b [c_out] (may be null)
// Workspace sizes are in elements of T.
std::size_t conv2d_forward_workspace(const Conv2dShape& s);
std::size_t conv2d_backward_data_workspace(const Conv2dShape& s);
std::size_t conv2d_backward_weight_workspace(const Conv2dShape& s);
template <class T> void conv2d_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, T* workspace);
// dx (=|+=) conv-transpose of dy with w
template <class T>
void conv2d_backward_data(T* dx, const T* dy, const T* w, const Conv2dShape& s, T* workspace, bool accumulate);
// dw (=|+=) correlation of x with dy; db (=|+=) sum of dy over n, h, w (db may be null)
template <class T>
void conv2d_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, T* workspace,
                            bool accumulate);

// ---- pooling (NCHW). Padding cells never win a max and count as zeros for the average
// (PyTorch's count_include_pad=True default). Rows are processed through fixed stack buffers, so the
// input and output width must be at most kMaxPoolWidth (the pooling ops check it).
inline constexpr int kMaxPoolWidth = 2048;
// Also records each window's first maximum as its row-major offset inside the window (kh * kw <= 256),
// so the backward needs neither x nor y: 1 byte kept per output instead of the whole input.
template <class T> void max_pool2d_forward(T* y, uint8_t* argmax, const T* x, const Pool2dShape& s);
// Routes dy to the recorded maxima.
template <class T>
void max_pool2d_backward(T* dx, const T* dy, const uint8_t* argmax, const Pool2dShape& s, bool accumulate);
template <class T> void avg_pool2d_forward(T* y, const T* x, const Pool2dShape& s);
template <class T> void avg_pool2d_backward(T* dx, const T* dy, const Pool2dShape& s, bool accumulate);
// global average pool: x [n, c, hw] -> y [n, c]
template <class T> void global_avg_pool_forward(T* y, const T* x, int n, int c, int hw);
template <class T> void global_avg_pool_backward(T* dx, const T* dy, int n, int c, int hw, bool accumulate);
// adaptive average pool (PyTorch's bins, shapes.h). The backward gathers: each input cell (=|+=) the sum
// of dy / bin size over the bins that contain it, so no two threads write one cell.
template <class T> void adaptive_avg_pool2d_forward(T* y, const T* x, const AdaptivePool2dShape& s);
template <class T>
void adaptive_avg_pool2d_backward(T* dx, const T* dy, const AdaptivePool2dShape& s, bool accumulate);

// ---- dropout over n samples of per_sample elements: y (=|+=) x * scale where kept, else 0, with the
// mask of kernels/dropout_mask.h for samples key.first_sample + i of the batch. The forward (x = input,
// write mode) and the backward (x = dy, the parameters' write mode) are the same map. y may alias x.
template <class T>
void dropout(T* y, const T* x, int n, std::size_t per_sample, const RandomKey& key, uint64_t layer,
             uint32_t threshold, T scale, bool accumulate);

// ---- elementwise. y may alias x (in place), dx may alias dy.
// y = max(x, 0), NaN propagating (PyTorch's torch.relu); the backward passes no gradient through NaN.
template <class T> void relu_forward(T* y, const T* x, std::size_t count);
// dx = dy where y > 0 else 0 (uses the forward *output*, so the forward may run in place)
template <class T> void relu_backward(T* dx, const T* dy, const T* y, std::size_t count, bool accumulate);
// y = a + b (y may alias a or b)
template <class T> void add_forward(T* y, const T* a, const T* b, std::size_t count);
// y (=|+=) x
template <class T> void copy_or_accumulate(T* y, const T* x, std::size_t count, bool accumulate);

// ---- normalisation (NCHW). Statistics are accumulated in double, with the variance from the mean's
// deviations (two passes), never E[x^2] - E[x]^2. invstd = 1 / sqrt(var + eps) with the biased var.
// `stats` holds, per normalisation group, its mean and invstd: BatchNorm [groups][2][c] (means, then
// invstds), GroupNorm [n][2][groups].
//
// BatchNorm, training: normalises with each group's statistics and writes them to stats. The running
// statistics follow one of two rules. moments != null (deferred): each group's (count, mean, M2) per
// channel is merged into moments [3][c] with Chan's parallel formula, in group order, so after all groups
// of a batch it holds the whole batch's count, mean and M2 whatever the grouping into calls; commit them
// with batch_norm_commit. running_mean != null (per-group): each group updates running_mean/var with
// momentum (unbiased var) and adds 1 to *tracked, as PyTorch does once per forward.
template <class T>
void batch_norm_forward_train(T* y, T* stats, const T* x, const T* w, const T* b, const BatchNormShape& s, double eps,
                              double* moments, T* running_mean, T* running_var, int64_t* tracked, double momentum);
// The training forward's output again from the statistics it wrote (identical bits): what a recomputation
// of a BatchNorm layer in the backward pass runs (engine/strategy/recompute.h).
template <class T>
void batch_norm_apply(T* y, const T* x, const T* w, const T* b, const T* stats, const BatchNormShape& s);
// One momentum update of the running statistics from the merged moments of a batch (unbiased variance
// M2 / (count - 1); 0 when a channel saw one value), and *tracked += 1.
template <class T>
void batch_norm_commit(T* running_mean, T* running_var, int64_t* tracked, const double* moments, int c, double momentum);
// BatchNorm with the running statistics (evaluation, or a frozen layer in training). stats (may be null)
// receives running_mean and 1 / sqrt(running_var + eps) for every group, for the backward.
template <class T>
void batch_norm_forward_frozen(T* y, T* stats, const T* x, const T* w, const T* b, const T* running_mean,
                               const T* running_var, const BatchNormShape& s, double eps);
// dw, db (=|+=) sum of dy * xhat, sum of dy per channel; dx (= always; may be null) the gradient
// through the group statistics (batch_stats) or through the affine map alone (a frozen layer).
template <class T>
void batch_norm_backward(T* dw, T* db, T* dx, const T* dy, const T* x, const T* w, const T* stats,
                         const BatchNormShape& s, bool batch_stats, bool accumulate);

// GroupNorm (same in training and evaluation).
template <class T>
void group_norm_forward(T* y, T* stats, const T* x, const T* w, const T* b, const GroupNormShape& s, double eps);
template <class T>
void group_norm_backward(T* dw, T* db, T* dx, const T* dy, const T* x, const T* w, const T* stats,
                         const GroupNormShape& s, bool accumulate);

// ---- softmax cross-entropy over logits [n, k] with int32 labels [n] in [0, k).
// Writes probs [n, k] (kept for the backward) and returns the *sum* over the n samples of
// -log p[label], computed stably (max-subtracted log-sum-exp), accumulated in double.
template <class T> double softmax_xent_forward(T* probs, const T* logits, const int32_t* labels, int n, int k);
// dlogits (=|+=) scale * (probs - onehot(labels)). scale is 1/B for a batch of B samples.
template <class T>
void softmax_xent_backward(T* dlogits, const T* probs, const int32_t* labels, int n, int k, T scale, bool accumulate);
// Number of rows whose argmax equals the label (first maximum wins).
template <class T> int count_correct(const T* probs, const int32_t* labels, int n, int k);

// Elements of x that are NaN or infinite (divergence detection after an optimizer step).
std::size_t count_nonfinite(const float* x, std::size_t count);

// ---- optimizers: one pass over a flat parameter block.
// torch.optim.SGD semantics (dampening 0): g = grad + weight_decay * p;
// buf = first_step ? g : momentum * buf + g; p -= lr * u with u = g + momentum * buf under Nesterov,
// else buf (momentum != 0), else g. momentum_buf is never touched (may be null) when momentum == 0 and
// is not read on the first step (may hold garbage). nesterov needs momentum != 0.
void sgd_momentum_step(float* params, const float* grads, float* momentum_buf, std::size_t count, float lr,
                       float momentum, float weight_decay, bool nesterov, bool first_step);

// torch.optim.AdamW (foreach=False, capturable=False), op for op in float32, scalars from
// adamw_scalars(): p *= decay; exp_avg = lerp(exp_avg, g, 1 - beta1);
// exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g; denom = sqrt(exp_avg_sq) / bc2_sqrt + eps;
// p += neg_step_size * exp_avg / denom. exp_avg and exp_avg_sq start as zeros (PyTorch's zeros_like).
void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t count,
                const AdamWScalars& s);

}  // namespace crumb::cpu
