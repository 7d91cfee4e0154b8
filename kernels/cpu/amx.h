// What the AMX kernels (conv2d_bf16.cc, conv2d_weight_amx.cc) share: the target attribute their functions
// carry (built into every AVX-512 build beside the vdpbf16ps kernels, chosen at run time by uses_amx())
// and LDTILECFG's 64-byte configuration. Tile instructions are inline asm without memory operands in
// GCC's headers, so a kernel puts a compiler barrier (amx_fence) between packing its operands and loading
// them into tiles.
#pragma once

#include "kernels/cpu/dpbf16.h"
#include "kernels/cpu/shapes.h"

namespace crumb::cpu {

// Whether a convolution's groups fill AMX's tiles: 16 input and 16 output channels at least. Fewer would
// multiply mostly padding (a depthwise or 3-channel layer); those keep the vdpbf16ps or widened paths.
inline bool amx_tiles_fit(const Conv2dShape& s) { return s.c_in / s.groups >= 16 && s.c_out / s.groups >= 16; }

}  // namespace crumb::cpu

#if CRUMB_DPBF16
#include <cstdint>

#define CRUMB_TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))

namespace crumb::cpu::detail {

// Palette 1: each tile's rows and bytes per row.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline void amx_fence() { asm volatile("" ::: "memory"); }

}  // namespace crumb::cpu::detail
#endif
