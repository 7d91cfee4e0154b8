// Convolutions on maps of 7x7 and up (strided: 128 output pixels and up) without im2col: each sample is copied once into zero-padded planes
// (split into stride_h x stride_w phase planes when strided, so that every tap reads a contiguous run),
// and the GEMMs read their column matrix straight out of them (an implicit im2col; ordered_gemm's
// RhsRows). Output pixels are computed on the padded width, so one column-matrix row is a contiguous run
// of a plane; the few columns past the real width are computed and dropped. The data gradient of a
// strided convolution stays with im2col (its taps do not reduce to one correlation). What this saves:
// im2col writes (and the GEMM reads back) kh * kw copies of the input, col2im as many adds, and Eigen
// packs both operands, which on 16-64 channels cost as much as the multiply-adds.
//
// conv2d.cc picks this path by the shape of one sample alone (never n), so the forward pass stays
// bitwise the same at every micro-batch size: each output is one ordered sequence of fmas.
#pragma once
#include <cstddef>

#include "kernels/cpu/shapes.h"

namespace crumb::cpu::detail {

// Forward and weight gradient; the data gradient where conv2d_direct_data.
bool conv2d_direct(const Conv2dShape& s);
bool conv2d_direct_data(const Conv2dShape& s);

enum class ConvPass { Forward, Data, Weight };

// Workspace elements per slice (one thread's samples) for one pass.
std::ptrdiff_t direct_slice_len(const Conv2dShape& s, ConvPass pass);
// Workspace elements shared by the slices of the backward-data pass: the flipped, transposed weights.
std::ptrdiff_t direct_shared_len(const Conv2dShape& s);

// Samples [i0, i1) of the batch, with ws the slice's workspace.
template <class T>
void direct_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, int i0, int i1, T* ws);
// wf: direct_flip_weights' output, written once per call before the slices run.
template <class T> void direct_flip_weights(T* wf, const T* w, const Conv2dShape& s);
template <class T>
void direct_backward_data(T* dx, const T* dy, const T* wf, const Conv2dShape& s, int i0, int i1, T* ws, bool accumulate);
// dw (=|+=) the samples' weight gradient; db likewise where not null.
template <class T>
void direct_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, int i0, int i1, T* ws,
                            bool accumulate);

}  // namespace crumb::cpu::detail
