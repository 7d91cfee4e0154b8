// CPU linear-layer kernels. The conventions of every CPU kernel (raw pointers, explicit shapes, no allocation, write
// modes, float and double) are in docs/architecture.md, Kernels.
#pragma once
#include <cstddef>

#include "kernels/bf16_dot.h"
#include "kernels/half.h"

namespace crumb::cpu {

// ---- linear: x [n, in], w [out, in] (PyTorch layout), b [out] (may be null), y [n, out]
// relu: y = max(x w^T + b, 0) as each block is stored (a fused ReLU epilogue, as conv2d_forward's).
// workspace: linear_forward_workspace(n, in, out) elements of T (w transposed, or x and y). Each y entry's
// bits depend on its own sample alone, not on n or the thread count.
std::size_t linear_forward_workspace(int n, int in, int out);
template <class T>
void linear_forward(T* y, const T* x, const T* w, const T* b, int n, int in, int out, T* workspace,
                    bool relu = false);
// dx [n, in] (=|+=) dy [n, out] * w [out, in]; workspace: linear_backward_data_workspace(in, out) elements
// of T (w rearranged in panels).
std::size_t linear_backward_data_workspace(int in, int out);
template <class T>
void linear_backward_data(T* dx, const T* dy, const T* w, int n, int in, int out, T* workspace, bool accumulate);
// dw [out, in] (=|+=) dy^T x; db [out] (=|+=) sum over n of dy (db may be null)
template <class T>
void linear_backward_weight(T* dw, T* db, const T* dy, const T* x, int n, int in, int out, bool accumulate);

// ---- bf16 through AVX512_BF16 (kernels/cpu/linear_bf16.cc): products of bf16 pairs summed in float32,
// y stored rounded to nearest even; b is float32 or bf16. Only where has_bf16_dot(): elsewhere bf16 runs
// the float32 kernels on widened copies.
template <class B>
void linear_forward_bf16(bf16* y, const bf16* x, const bf16* w, const B* b, int n, int in, int out, bool relu = false);

// ---- bf16 on AMX (kernels/cpu/linear_amx.cc), all three passes, where uses_amx(): tile GEMMs of bf16
// products summed in float32, each output's sum over its K in order (a sample's forward output does not
// depend on the batch), y and dx rounded once (dx += in float32 first), dw and db float32 (=|+=). One
// workspace size, in bf16 elements, serves the three.
std::size_t linear_amx_workspace(int n, int in, int out);
template <class B>
void linear_forward_amx(bf16* y, const bf16* x, const bf16* w, const B* b, int n, int in, int out, bf16* workspace,
                        bool relu = false);
void linear_backward_data_amx(bf16* dx, const bf16* dy, const bf16* w, int n, int in, int out, bf16* workspace,
                              bool accumulate);
void linear_backward_weight_amx(float* dw, float* db, const bf16* dy, const bf16* x, int n, int in, int out,
                                bf16* workspace, bool accumulate);

}  // namespace crumb::cpu
