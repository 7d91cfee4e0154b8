#include "kernels/bf16_dot.h"

namespace crumb::cpu {

bool has_bf16_dot() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return has;
#else
  return false;
#endif
}

}  // namespace crumb::cpu
