#include "tools/train/rss.h"

#include <sys/resource.h>

#include <fstream>
#include <string>

namespace crumb::train {

std::size_t max_rss_bytes() {
  struct rusage u;
  return ::getrusage(RUSAGE_SELF, &u) == 0 ? static_cast<std::size_t>(u.ru_maxrss) * 1024 : 0;
}

void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

std::size_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  std::size_t kib = 0;
  while (status >> key)
    if (key == "VmHWM:" && status >> kib) return kib * 1024;
  return max_rss_bytes();
}

}  // namespace crumb::train
