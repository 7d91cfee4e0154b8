// Grouped convolutions (Conv2dShape::groups > 1): the input's channels in `groups` blocks, each convolved
// with its own block of output channels; w [c_out, c_in / groups, kh, kw]. conv2d.cc hands them here.
// - Depthwise (one input channel per group, c_out a multiple of c_in: MobileNet's 3x3 layers): direct
//   loops over whole planes, threaded over planes (over output channels for the weight gradient, so
//   nothing is shared and no partial sums are needed). A GEMM per group would be a product with one
//   row of depth kh * kw, far from any GEMM's speed.
// - Other group counts: each group through the ungrouped kernels (conv2d.h) on contiguous copies of its
//   channels in the workspace, so every path and thread split of those serves each group.
// Each forward output is one ordered sum (bias, then the taps in order), so the forward stays bitwise
// the same at every micro-batch size, as the ungrouped kernels do.
#pragma once
#include <cstddef>

#include "kernels/cpu/shapes.h"

namespace crumb::cpu::detail {

// Workspace elements of each pass (as conv2d.h's).
std::size_t grouped_forward_workspace(const Conv2dShape& s);
std::size_t grouped_backward_data_workspace(const Conv2dShape& s);
std::size_t grouped_backward_weight_workspace(const Conv2dShape& s);

// conv2d.h's passes for s.groups > 1.
template <class T> void grouped_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, T* workspace);
template <class T>
void grouped_backward_data(T* dx, const T* dy, const T* w, const Conv2dShape& s, T* workspace, bool accumulate);
template <class T>
void grouped_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, T* workspace,
                             bool accumulate);

}  // namespace crumb::cpu::detail
