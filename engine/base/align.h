// Alignment of every block the engine hands out: arena offsets, staging slots, host-pool offsets.
#pragma once
#include <cstddef>

namespace crumb {

// 256 bytes: what cuBLAS, cuDNN and vector loads want of a pointer.
inline constexpr std::size_t kArenaAlign = 256;

inline std::size_t align_up(std::size_t x, std::size_t a = kArenaAlign) { return (x + a - 1) / a * a; }

}  // namespace crumb
