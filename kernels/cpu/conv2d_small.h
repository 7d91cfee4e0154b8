// Convolutions with small output maps (4x4 and under: ResNet-18's late stages on 28x28 inputs; up to
// 7x7 for kernels over 1x1 with cache-sized weights) as one GEMM per output pixel, with the samples as
// its columns and only the kernel taps that land inside the image as its depth. On such maps most taps
// read padding (8 of 9 on a 1x1 map, 5 of 9 on 2x2), which im2col + GEMM multiplies by anyway. The
// batch is transposed once to pixel-major rows of samples, so every GEMM reads its operands in place
// (ordered_gemm's RhsRows and LhsCols).
//
// conv2d.cc picks this path for the forward by the shape of one sample alone (never n); each forward
// output is one ordered sequence of fmas, so the forward pass stays bitwise the same at every
// micro-batch size.
#pragma once
#include <cstddef>

#include "kernels/cpu/shapes.h"

namespace crumb::cpu::detail {

// Output maps up to 4x4, every pass; by the shape of one sample alone.
bool conv2d_small(const Conv2dShape& s);
// The forward: those, and the same-size stride-1 maps conv2d_small_backward takes.
bool conv2d_small_forward(const Conv2dShape& s);
// The backward passes of maps up to 7x7 (kernels over 1x1 whose weights fit in cache), in slices of
// at least kSmallBackwardSamples samples: the caller decides per slice (the backward may round
// differently at different n; the forward may not).
bool conv2d_small_backward(const Conv2dShape& s);
inline constexpr int kSmallBackwardSamples = 32;

// Workspace elements per slice (one thread's samples): the forward and data-gradient passes'; the weight
// gradient's adds the slice's sums over the live taps (small_taps_len) after them.
std::ptrdiff_t small_slice_len(const Conv2dShape& s);
std::ptrdiff_t small_weight_slice_len(const Conv2dShape& s);
// The weight gradient's sums over the taps some output pixel reads (on a 1x1 map the centre alone; the
// other taps' gradient is zero): [live tap, c_out, c_in], the taps in the order the output pixels first reach them.
std::ptrdiff_t small_taps_len(const Conv2dShape& s);

// Samples [i0, i1) of the batch, with ws the slice's workspace.
template <class T>
void small_forward(T* y, const T* x, const T* w, const T* b, const Conv2dShape& s, int i0, int i1, T* ws);
template <class T>
void small_backward_data(T* dx, const T* dy, const T* w, const Conv2dShape& s, int i0, int i1, T* ws, bool accumulate);
// dw (=|+=) the samples' weight gradient; db likewise where not null. ws: small_weight_slice_len.
template <class T>
void small_backward_weight(T* dw, T* db, const T* dy, const T* x, const Conv2dShape& s, int i0, int i1, T* ws,
                           bool accumulate);
// The two halves of small_backward_weight, for callers that sum slices first: by_tap (=) the samples' sums
// over the live taps (db (=|+=) as above; ws: small_slice_len), then dw (=|+=) by_tap's blocks in place of
// the live taps, zero elsewhere (threaded).
template <class T>
void small_weight_taps(T* by_tap, T* db, const T* dy, const T* x, const Conv2dShape& s, int i0, int i1, T* ws,
                       bool accumulate_db);
template <class T> void small_weight_store(T* dw, const T* by_tap, const Conv2dShape& s, bool accumulate);

}  // namespace crumb::cpu::detail
