// Pooling kernels (the CUDA global average pool is in the elementwise kernels and kernels/cuda/reduce.h): the CPU's
// (crumb::cpu, kernels/cpu/pool.cc) and their CUDA twins (crumb::cuda, kernels/cuda/pool.cu). The conventions of every
// CPU kernel (raw pointers, explicit shapes, no allocation, write modes, float and double) are in docs/architecture.md,
// Kernels; those of every CUDA launcher (device pointers, the CPU twin's semantics, checked preconditions, asynchronous
// on `stream`, no allocation) in docs/cuda.md.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/shapes.h"
#include "kernels/half.h"
#include "kernels/host_device.h"

namespace crumb::cpu {

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

}  // namespace crumb::cpu

namespace crumb::cuda {

// ---- pooling on NCHW or NHWC (the shape's layout; argmax in y's): x [n, c, h, w], y [n, c, h_out, w_out]
// with the floor output size
// h_out = (h + 2 * pad_h - kh) / stride_h + 1 (likewise w_out), padding at most half the window; all
// checked, as in the pooling ops. Padding cells never win a max and count as zeros in the average
// (count_include_pad=True: every window sum is divided by kh * kw). One thread per element, gathers
// only: deterministic, and equal to the CPU kernels bit for bit (the caveat is at avg_pool2d_backward).
// No output may alias an input. T is float, bf16 or f16 (kernels/half.h): 16-bit values are loaded as
// float, summed in float32 in the same order and stored rounded once.
// y and argmax [n, c, h_out, w_out]; kh * kw <= 256. argmax is the row-major offset ki * kw + kj inside
// the window of its first maximum. A NaN wins (of several, the same one as on the CPU).
template <class T>
void max_pool2d_forward(T* y, uint8_t* argmax, const T* x, const cpu::Pool2dShape& s, cudaStream_t stream);
// dx [n, c, h, w] (=|+=) dy [n, c, h_out, w_out] routed to the cells argmax points at (overlapping windows
// may route several to one cell).
template <class T>
void max_pool2d_backward(T* dx, const T* dy, const uint8_t* argmax, const cpu::Pool2dShape& s, bool accumulate,
                         cudaStream_t stream);
// y = window sums of x / (kh * kw)
template <class T> void avg_pool2d_forward(T* y, const T* x, const cpu::Pool2dShape& s, cudaStream_t stream);
// dx (=|+=) the sum of dy / (kh * kw) over the windows covering each cell. The product and add are fused
// (fma), as GCC compiles the CPU kernel for targets with FMA; against a CPU build without it the results
// differ in rounding.
template <class T>
void avg_pool2d_backward(T* dx, const T* dy, const cpu::Pool2dShape& s, bool accumulate, cudaStream_t stream);

// ---- adaptive average pool (PyTorch's bins, kernels/cpu/shapes.h); one thread per element, gathers in
// the CPU's order, so both devices agree bit for bit. No output may alias an input.
template <class T>
void adaptive_avg_pool2d_forward(T* y, const T* x, const cpu::AdaptivePool2dShape& s, cudaStream_t stream);
template <class T>
void adaptive_avg_pool2d_backward(T* dx, const T* dy, const cpu::AdaptivePool2dShape& s, bool accumulate,
                                  cudaStream_t stream);

}  // namespace crumb::cuda
