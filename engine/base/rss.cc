#include "engine/base/rss.h"

#include <malloc.h>
#include <sys/resource.h>

#include <fstream>
#include <string>

namespace crumb {
namespace {

// A "Vm...:" line of /proc/self/status, in bytes (0 where there is none).
std::size_t status_bytes(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string word;
  std::size_t kib = 0;
  while (status >> word)
    if (word == key && status >> kib) return kib * 1024;
  return 0;
}

}  // namespace

std::size_t max_rss_bytes() {
  struct rusage u;
  return ::getrusage(RUSAGE_SELF, &u) == 0 ? static_cast<std::size_t>(u.ru_maxrss) * 1024 : 0;
}

RssGrowth::RssGrowth() {
  ::malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
  start_ = status_bytes("VmRSS:");
}

std::size_t RssGrowth::peak_bytes() const {
  const std::size_t peak = status_bytes("VmHWM:");
  return peak > start_ ? peak - start_ : 0;
}

}  // namespace crumb
