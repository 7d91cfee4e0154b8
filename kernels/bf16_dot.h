// Whether this CPU runs the bf16 kernels built on AVX512_BF16's vdpbf16ps (linear_forward_bf16,
// conv2d_forward_bf16): they are compiled with target attributes into every x86-64 build and chosen at
// run time, a CPU without the instructions running bf16 layers on widened float32 copies instead.
#pragma once

namespace crumb::cpu {

bool has_bf16_dot();

// Whether the bf16 convolutions and linear layers multiply on AMX tiles (TDPBF16PS: 16 x 16 float32
// sums of 32 bf16 products a step) where their shapes fill them, instead of vdpbf16ps: has_amx(), and
// allow_amx has not turned it off.
bool uses_amx();
// Whether the CPU has AMX-BF16, Linux granted the process its tile data (arch_prctl), and the
// environment's CRUMB_CPU_AMX is not "off" (to compare the two paths, or a run's bits with a CPU
// without AMX), whatever allow_amx says.
bool has_amx();
// CRUMB_CPU_AMX's value where it is neither unset, empty, "on" nor "off" (the engine refuses it with
// one error line), or nullptr.
const char* bad_amx_setting();
// Tests run both tile paths on a CPU with AMX. The convolution kernels choose theirs as they run, so
// where the CPU has AMX their workspace sizes are those of the larger path: a plan compiled under one
// setting runs safely under the other.
void allow_amx(bool allowed);

}  // namespace crumb::cpu
