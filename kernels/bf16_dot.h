// Whether this CPU runs the bf16 kernels built on AVX512_BF16's vdpbf16ps (linear_forward_bf16,
// conv2d_forward_bf16): they are compiled with target attributes into every x86-64 build and chosen at
// run time, a CPU without the instructions running bf16 layers on widened float32 copies instead.
#pragma once

namespace crumb::cpu {

bool has_bf16_dot();

}  // namespace crumb::cpu
