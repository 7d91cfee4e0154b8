// Elementwise kernels: the CPU's (crumb::cpu, kernels/cpu/elementwise.cc) and their CUDA twins (crumb::cuda,
// kernels/cuda/elementwise.cu). The conventions of every CPU kernel (raw pointers, explicit shapes, no allocation,
// write modes, float and double) are in docs/architecture.md, Kernels; those of every CUDA launcher (device pointers,
// the CPU twin's semantics, checked preconditions, asynchronous on `stream`, no allocation) in docs/cuda.md.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/half.h"
#include "kernels/host_device.h"

namespace crumb::cpu {

// ---- elementwise. y may alias x (in place), dx may alias dy.
// y = max(x, 0), NaN propagating (PyTorch's torch.relu); the backward passes no gradient through NaN.
template <class T> void relu_forward(T* y, const T* x, std::size_t count);
// dx = dy where y > 0 else 0 (uses the forward *output*, so the forward may run in place)
template <class T> void relu_backward(T* dx, const T* dy, const T* y, std::size_t count, bool accumulate);
// y = x where x > 0 else slope * x, NaN propagating (torch.nn.LeakyReLU); slope >= 0, so that y > 0 exactly
// where x > 0 and the backward can read the output.
template <class T> void leaky_relu_forward(T* y, const T* x, std::size_t count, double slope);
// dx (=|+=) dy where y > 0 else slope * dy (the forward *output*, so the forward may run in place)
template <class T>
void leaky_relu_backward(T* dx, const T* dy, const T* y, std::size_t count, double slope, bool accumulate);
// y = min(max(x, lo), hi), NaN propagating (torch.nn.Hardtanh; ReLU6 is lo 0, hi 6); lo < hi.
template <class T> void hardtanh_forward(T* y, const T* x, std::size_t count, double lo, double hi);
// dx (=|+=) dy where y is strictly inside the bounds (as T stores them) else 0: y is inside exactly where
// x is (PyTorch's rule, up to a 16-bit rounding onto a bound), so the forward may run in place
template <class T>
void hardtanh_backward(T* dx, const T* dy, const T* y, std::size_t count, double lo, double hi, bool accumulate);
// y = a + b (y may alias a or b)
template <class T> void add_forward(T* y, const T* a, const T* b, std::size_t count);
// y (=|+=) x
template <class T> void copy_or_accumulate(T* y, const T* x, std::size_t count, bool accumulate);

// Elements of x that are NaN or infinite (divergence detection after an optimizer step).
std::size_t count_nonfinite(const float* x, std::size_t count);
std::size_t count_nonfinite(const double* x, std::size_t count);

}  // namespace crumb::cpu

namespace crumb::cuda {

// Each launcher is defined for T = float and the 16-bit storage types bf16 and f16 (kernels/half.h),
// which it loads as float, computes on in float32 and stores rounded to nearest even.

// ---- elementwise over `count` elements. y may alias x (in place), dx may alias dy.
template <class T> void relu_forward(T* y, const T* x, std::size_t count, cudaStream_t stream);
// dx (=|+=) dy where y > 0 else 0 (the forward *output*, so the forward may run in place)
template <class T>
void relu_backward(T* dx, const T* dy, const T* y, std::size_t count, bool accumulate, cudaStream_t stream);
// The CPU twins' activations; slope, lo and hi as float (what the kernels compute in).
template <class T> void leaky_relu_forward(T* y, const T* x, std::size_t count, float slope, cudaStream_t stream);
template <class T>
void leaky_relu_backward(T* dx, const T* dy, const T* y, std::size_t count, float slope, bool accumulate,
                         cudaStream_t stream);
template <class T> void hardtanh_forward(T* y, const T* x, std::size_t count, float lo, float hi, cudaStream_t stream);
template <class T>
void hardtanh_backward(T* dx, const T* dy, const T* y, std::size_t count, float lo, float hi, bool accumulate,
                       cudaStream_t stream);
// y = a + b (y may alias a or b)
template <class T> void add_forward(T* y, const T* a, const T* b, std::size_t count, cudaStream_t stream);
// y (=|+=) x
template <class T> void copy_or_accumulate(T* y, const T* x, std::size_t count, bool accumulate, cudaStream_t stream);

// ---- per-channel broadcasts on [n, c, hw] tensors (hw = 1 for a linear layer's [n, c])
// y [n, c, hw] += b [c], in place
template <class T> void bias_add_nchw(T* y, const T* b, int n, int c, int hw, cudaStream_t stream);
// dx [n, c, hw] (=|+=) dy [n, c] / hw: the global average pool's backward
template <class T>
void global_avg_pool_backward(T* dx, const T* dy, int n, int c, int hw, bool accumulate, cudaStream_t stream);

}  // namespace crumb::cuda
