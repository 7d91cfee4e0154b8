// CPU pooling kernels. The conventions of every CPU kernel (raw pointers, explicit shapes, no allocation, write
// modes, float and double) are in docs/architecture.md, Kernels.
#pragma once
#include <cstdint>

#include "kernels/cpu/shapes.h"

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
