// Counts heap allocations of the whole test process (every thread): operator new always, and malloc
// & co. where the build allows replacing them (not under AddressSanitizer, which owns malloc).
#pragma once
#include <cstdint>

namespace crumb {
struct AllocCount {
  uint64_t news = 0, mallocs = 0;
};
AllocCount alloc_count();
bool alloc_counter_counts_malloc();
}  // namespace crumb
