#include "kernels/bf16_dot.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "kernels/cpu/dpbf16.h"

#if CRUMB_DPBF16 && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace crumb::cpu {
namespace {

std::atomic<bool> amx_allowed{true};

constexpr const char* kAmxSetting = "CRUMB_CPU_AMX";
// Unset counts as empty.
bool amx_setting_is(const char* value) {
  const char* set = std::getenv(kAmxSetting);
  return std::string(set ? set : "") == value;
}

bool has_amx_bf16() {
#if CRUMB_DPBF16 && defined(__linux__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
  // Linux gives a process AMX's 8 KiB of tile state only when asked (ARCH_REQ_XCOMP_PERM for
  // XFEATURE_XTILEDATA); without it the first tile instruction faults.
  constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
  return tile && bf16 && syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
#else
  return false;
#endif
}

}  // namespace

bool has_bf16_dot() {
#if CRUMB_DPBF16
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return has;
#else
  return false;
#endif
}

bool has_amx() {
  static const bool has = has_bf16_dot() && has_amx_bf16() && !amx_setting_is("off");
  return has;
}

const char* bad_amx_setting() {
  return amx_setting_is("") || amx_setting_is("on") || amx_setting_is("off") ? nullptr : std::getenv(kAmxSetting);
}

bool uses_amx() { return has_amx() && amx_allowed.load(std::memory_order_relaxed); }

void allow_amx(bool allowed) { amx_allowed.store(allowed, std::memory_order_relaxed); }

}  // namespace crumb::cpu
