#include "kernels/cpu_kernels.h"

#include "kernels/bf16_dot.h"

namespace crumb::cpu {

const char* vector_isa() {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__)
  return "avx2";
#elif defined(__SSE4_2__)
  return "sse4.2";
#elif defined(__SSE2__)
  return "sse2";
#elif defined(__ARM_NEON)
  return "neon";
#else
  return "generic";
#endif
}

const char* bf16_multiply() { return uses_amx() ? "amx" : has_bf16_dot() ? "avx512_bf16" : "float32"; }

}  // namespace crumb::cpu
