// Softmax cross-entropy kernels: the CPU's (crumb::cpu, kernels/cpu/softmax_xent.cc) and their CUDA twins (crumb::cuda,
// kernels/cuda/softmax_xent.cu). The conventions of every CPU kernel (raw pointers, explicit shapes, no allocation,
// write modes, float and double) are in docs/architecture.md, Kernels; those of every CUDA launcher (device pointers,
// the CPU twin's semantics, checked preconditions, asynchronous on `stream`, no allocation) in docs/cuda.md.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/half.h"
#include "kernels/host_device.h"

namespace crumb::cpu {

// ---- softmax cross-entropy over logits [n, k] with int32 labels [n] in [0, k).
// Writes probs [n, k] (kept for the backward) and returns the *sum* over the n samples of
// -log p[label], computed stably (max-subtracted log-sum-exp), accumulated in double.
// Logits of a 16-bit T (kernels/half.h) are loaded as float; probs are Arith<T> (float32 then).
template <class T>
double softmax_xent_forward(Arith<T>* probs, const T* logits, const int32_t* labels, int n, int k);
// dlogits (=|+=) scale * (probs - onehot(labels)). scale is 1/B for a batch of B samples.
template <class T>
void softmax_xent_backward(T* dlogits, const Arith<T>* probs, const int32_t* labels, int n, int k, Arith<T> scale,
                           bool accumulate);
// Number of rows whose argmax equals the label (first maximum wins).
template <class T> int count_correct(const T* probs, const int32_t* labels, int n, int k);

}  // namespace crumb::cpu

namespace crumb::cuda {

// ---- softmax cross-entropy over logits [n, k] with int32 labels [n] in [0, k) (not checked on the device).
// T is float, bf16 or f16 (kernels/half.h): logits and dlogits are T, computed in float32; probs are float32
// (the master dtype: softmax and the loss stay float32 in mixed precision, as under autocast).
// Writes probs [n, k] and *adds* to two device counters, which the caller zeroes once per step so that
// all micro-batches of a step accumulate on the device and are read back with one copy:
//   *loss_sum_dev += sum over rows of -log p[label] (max-subtracted log-sum-exp, added in double);
//   *correct_dev  += rows whose first maximum of probs is the label (the CPU's count_correct).
// Rows are summed with atomics, so the loss sum's rounding may vary between runs (in the last bits of a
// double); the probs and the count are deterministic.
template <class T>
void softmax_xent_forward(float* probs, const T* logits, const int32_t* labels, int n, int k, double* loss_sum_dev,
                          unsigned long long* correct_dev, cudaStream_t stream);
// dlogits [n, k] (=|+=) scale * (probs - onehot(labels)). scale is 1/B for a batch of B samples.
template <class T>
void softmax_xent_backward(T* dlogits, const float* probs, const int32_t* labels, int n, int k, float scale,
                           bool accumulate, cudaStream_t stream);

}  // namespace crumb::cuda
