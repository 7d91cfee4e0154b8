#include "kernels/bf16_dot.h"

#include "kernels/cpu/dpbf16.h"

namespace crumb::cpu {

bool has_bf16_dot() {
#if CRUMB_DPBF16
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return has;
#else
  return false;
#endif
}

}  // namespace crumb::cpu
