// Stride-2 bf16 convolutions as stride-1 ones over the input's phases (space to depth), so that they run
// on the stride-1 AMX tiles (conv2d_bf16.cc, conv2d_weight_amx.cc) instead of a column matrix. With xp
// the zero-padded input, y[oh][ow] = sum over taps (2a + r, 2b + t) of w[2a + r][2b + t] xp[2 (oh + a) + r]
// [2 (ow + b) + t]: phase (r, t) of xp, X_rt[i][j] = xp[2 i + r][2 j + t], is one input channel more, and
// the convolution a stride-1 one with ceil(k / 2) taps a side, no padding, over c_in x (phases) channels;
// the taps past the kernel (2a + r >= k) have zero weights (a 3x3 kernel multiplies 16 taps for 9; a 1x1
// would have one phase: a subsampled input, which 1x1 kernels keep their own paths for). Samples go
// through in chunks, whose phased input is workspace.
#pragma once

#include <cstddef>

#include "kernels/bf16_dot.h"
#include "kernels/cpu/shapes.h"
#include "kernels/half.h"

namespace crumb::cpu::detail {

// Whether s runs through its phases: stride 2, ungrouped, over 1x1, the phases filling AMX tiles and amx
// (by default uses_amx()).
bool runs_phased(const Conv2dShape& s, bool amx);
bool runs_phased(const Conv2dShape& s);

std::size_t phased_forward_workspace(const Conv2dShape& s);
template <class B>
void phased_forward(bf16* y, const bf16* x, const bf16* w, const B* b, const Conv2dShape& s, bf16* workspace,
                    bool relu);
std::size_t phased_data_workspace(const Conv2dShape& s);
void phased_data(bf16* dx, const bf16* dy, const bf16* w, const Conv2dShape& s, bf16* workspace, bool accumulate);
std::size_t phased_weight_workspace(const Conv2dShape& s);
void phased_weight(float* dw, float* db, const bf16* dy, const bf16* x, const Conv2dShape& s, bf16* workspace,
                   bool accumulate);

// db (=|+=) the sum of bf16 dy over samples and positions, in float32, channel by channel in order (the
// AMX weight gradients' bias).
void bias_gradient(float* db, const bf16* dy, const Conv2dShape& s, bool accumulate);

}  // namespace crumb::cpu::detail
