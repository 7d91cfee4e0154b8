// CPU convolution kernels. The conventions of every CPU kernel (raw pointers, explicit shapes, no allocation, write
// modes, float and double) are in docs/architecture.md, Kernels.
#pragma once
#include <cstddef>

#include "kernels/bf16_dot.h"
#include "kernels/cpu/shapes.h"
#include "kernels/half.h"

namespace crumb::cpu {

// ---- conv2d (NCHW), w [c_out, c_in / groups, kh, kw], b [c_out] (may be null)
// Workspace sizes are in elements of T.
std::size_t conv2d_forward_workspace(const Conv2dShape& s);
std::size_t conv2d_backward_data_workspace(const Conv2dShape& s);
std::size_t conv2d_backward_weight_workspace(const Conv2dShape& s);
// relu: y = max(conv + b, 0) (NaN propagating, as relu_forward), applied as each sample's output is stored
// (a fused ReLU epilogue: engine/graph/fusion.h).
template <class T>
void conv2d_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, T* workspace, bool relu = false);
// dx (=|+=) conv-transpose of dy with w
template <class T>
void conv2d_backward_data(T* dx, const T* dy, const T* w, const Conv2dShape& s, T* workspace, bool accumulate);
// dw (=|+=) correlation of x with dy; db (=|+=) sum of dy over n, h, w (db may be null)
template <class T>
void conv2d_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, T* workspace,
                            bool accumulate);

// ---- Winograd F(2x2, 3x3) (kernels/cpu/conv2d_winograd.cc): the same forward and data-gradient passes in
// 16 multiplies per 2x2 outputs instead of 36, for ungrouped stride-1 3x3 convolutions with padding <= 2.
// It rounds differently from the passes above (the transforms add before multiplying); which one runs is
// the caller's choice (engine/ops/conv2d_algo.h measures both).
bool conv2d_winograd_applies(const Conv2dShape& s);
std::size_t winograd_forward_workspace(const Conv2dShape& s);
std::size_t winograd_backward_data_workspace(const Conv2dShape& s);
template <class T> void winograd_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, T* workspace);
template <class T>
void winograd_backward_data(T* dx, const T* dy, const T* w, const Conv2dShape& s, T* workspace, bool accumulate);

// ---- bf16 forward through AVX512_BF16 (kernels/cpu/conv2d_bf16.cc), any groups, stride and padding:
// products of bf16 pairs summed in float32, y stored rounded to nearest even; b float32 or bf16. Only
// where has_bf16_dot(). Workspace in bf16 elements.
std::size_t conv2d_forward_bf16_workspace(const Conv2dShape& s);
template <class B>
void conv2d_forward_bf16(bf16* y, const bf16* x, const bf16* w, const B* b, const Conv2dShape& s, bf16* workspace,
                         bool relu = false);
// The data gradient the same way where s has stride 1 and padding under the kernel, or on AMX stride 2
// (conv2d_backward_data_bf16_direct): the correlation of dy with the flipped kernel, dx (=|+=) its sums
// (added to dx in float32 and rounded once). On AMX (uses_amx()) the stride-1 passes run on its tiles,
// and stride-2 ones as stride-1 passes over the input's phases (kernels/cpu/conv2d_phases.h).
bool conv2d_backward_data_bf16_direct(const Conv2dShape& s);
std::size_t conv2d_backward_data_bf16_workspace(const Conv2dShape& s);
void conv2d_backward_data_bf16(bf16* dx, const bf16* dy, const bf16* w, const Conv2dShape& s, bf16* workspace,
                               bool accumulate);

// ---- bf16 weight gradient on AMX (kernels/cpu/conv2d_weight_amx.cc) where uses_amx(), the stride is 1
// (or 2, through the input's phases) and each group has at least 16 input and 16 output channels
// (conv2d_backward_weight_amx_applies): dw
// [c_out, c_in / groups, kh, kw] and db [c_out] (may be null) in float32 (=|+=) the sums of dy's and x's
// bf16 products, each one fixed sequence (sample by sample) whatever the threads; s.lean takes one
// sample a pass, the same bits in less workspace. Workspace in bf16 elements.
bool conv2d_backward_weight_amx_applies(const Conv2dShape& s);
std::size_t conv2d_backward_weight_amx_workspace(const Conv2dShape& s);
void conv2d_backward_weight_amx(float* dw, float* db, const bf16* dy, const bf16* x, const Conv2dShape& s,
                                bf16* workspace, bool accumulate);

}  // namespace crumb::cpu
