// What the CPU kernels this process loaded run on, for a run's summary and --explain: a native build's
// kernels are the build machine's, a portable one's the level the dynamic loader picked for this CPU.
#pragma once

namespace crumb::cpu {

// The widest vector instructions the kernel library was compiled for: "avx512", "avx2", "sse4.2",
// "sse2", "neon" or "generic".
const char* vector_isa();
// How bf16 convolutions and linear layers multiply: "amx" (tiles, where a layer fills them; vdpbf16ps
// elsewhere), "avx512_bf16" (vdpbf16ps) or "float32" (on widened copies).
const char* bf16_multiply();

}  // namespace crumb::cpu
