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

#include <immintrin.h>

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

// LDTILECFG. GCC's _tile_loadconfig tells the compiler it reads only the first 8 bytes of the
// configuration, so the stores of the shapes after them can be dropped as dead: they were, where
// configure_square_tiles was inlined into the Python module's x86-64-v4 build, and the first tile
// instruction then raised SIGILL. This asm reads all 64 bytes.
inline void load_tile_config(const TileConfig& c) { asm volatile("ldtilecfg %0" : : "m"(c)); }

// Every tile 16 rows of 64 bytes (A: 16 rows of 32 bf16, B: 16 pairs of rows of 16 columns, C: 16 x 16
// float32), after the operands are in memory; released when a thread is done with its tiles.
CRUMB_TARGET_AMX inline void configure_square_tiles() {
  amx_fence();
  TileConfig c;
  for (int i = 0; i < 8; ++i) c.colsb[i] = 64, c.rows[i] = 16;
  load_tile_config(c);
}
CRUMB_TARGET_AMX inline void release_tiles() { _tile_release(); }

// An M x N block (M, N: 1 or 2) of 16 x 16 float32 sums in tiles 0-3 ((i, j) at 2 i + j), A in 4-5, B in
// 6-7: zeroed or loaded, one step of K, stored. Strides are in bytes; A's second block is 16 rows on, B's
// 16 columns (64 bytes) on, C's 16 rows and 16 columns.
template <int M, int N> CRUMB_TARGET_AMX inline void tiles_zero() {
  _tile_zero(0);
  if constexpr (N == 2) _tile_zero(1);
  if constexpr (M == 2) _tile_zero(2);
  if constexpr (M == 2 && N == 2) _tile_zero(3);
}
template <int M, int N> CRUMB_TARGET_AMX inline void tiles_load(const float* c, long stride) {
  const char* p = reinterpret_cast<const char*>(c);
  _tile_loadd(0, p, stride);
  if constexpr (N == 2) _tile_loadd(1, p + 64, stride);
  if constexpr (M == 2) _tile_loadd(2, p + 16 * stride, stride);
  if constexpr (M == 2 && N == 2) _tile_loadd(3, p + 16 * stride + 64, stride);
}
template <int M, int N> CRUMB_TARGET_AMX inline void tiles_step(const void* a, long a_stride, const void* b, long b_stride) {
  const char* pa = static_cast<const char*>(a);
  const char* pb = static_cast<const char*>(b);
  _tile_loadd(6, pb, b_stride);
  if constexpr (N == 2) _tile_loadd(7, pb + 64, b_stride);
  _tile_loadd(4, pa, a_stride);
  _tile_dpbf16ps(0, 4, 6);
  if constexpr (N == 2) _tile_dpbf16ps(1, 4, 7);
  if constexpr (M == 2) {
    _tile_loadd(5, pa + 16 * a_stride, a_stride);
    _tile_dpbf16ps(2, 5, 6);
    if constexpr (N == 2) _tile_dpbf16ps(3, 5, 7);
  }
}
template <int M, int N> CRUMB_TARGET_AMX inline void tiles_store(float* c, long stride) {
  char* p = reinterpret_cast<char*>(c);
  _tile_stored(0, p, stride);
  if constexpr (N == 2) _tile_stored(1, p + 64, stride);
  if constexpr (M == 2) _tile_stored(2, p + 16 * stride, stride);
  if constexpr (M == 2 && N == 2) _tile_stored(3, p + 16 * stride + 64, stride);
}

}  // namespace crumb::cpu::detail
#endif
