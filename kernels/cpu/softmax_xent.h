// CPU softmax cross-entropy kernels. The conventions of every CPU kernel (raw pointers, explicit shapes, no
// allocation, write modes, float and double) are in docs/architecture.md, Kernels.
#pragma once
#include <cstdint>

namespace crumb::cpu {

// ---- softmax cross-entropy over logits [n, k] with int32 labels [n] in [0, k).
// Writes probs [n, k] (kept for the backward) and returns the *sum* over the n samples of
// -log p[label], computed stably (max-subtracted log-sum-exp), accumulated in double.
template <class T> double softmax_xent_forward(T* probs, const T* logits, const int32_t* labels, int n, int k);
// dlogits (=|+=) scale * (probs - onehot(labels)). scale is 1/B for a batch of B samples.
template <class T>
void softmax_xent_backward(T* dlogits, const T* probs, const int32_t* labels, int n, int k, T scale, bool accumulate);
// Number of rows whose argmax equals the label (first maximum wins).
template <class T> int count_correct(const T* probs, const int32_t* labels, int n, int k);

}  // namespace crumb::cpu
