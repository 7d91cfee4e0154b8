// CPU elementwise kernels. The conventions of every CPU kernel (raw pointers, explicit shapes, no allocation, write
// modes, float and double) are in docs/architecture.md, Kernels.
#pragma once
#include <cstddef>

namespace crumb::cpu {

// ---- elementwise. y may alias x (in place), dx may alias dy.
// y = max(x, 0), NaN propagating (PyTorch's torch.relu); the backward passes no gradient through NaN.
template <class T> void relu_forward(T* y, const T* x, std::size_t count);
// dx = dy where y > 0 else 0 (uses the forward *output*, so the forward may run in place)
template <class T> void relu_backward(T* dx, const T* dy, const T* y, std::size_t count, bool accumulate);
// y = a + b (y may alias a or b)
template <class T> void add_forward(T* y, const T* a, const T* b, std::size_t count);
// y (=|+=) x
template <class T> void copy_or_accumulate(T* y, const T* x, std::size_t count, bool accumulate);

// Elements of x that are NaN or infinite (divergence detection after an optimizer step).
std::size_t count_nonfinite(const float* x, std::size_t count);

}  // namespace crumb::cpu
