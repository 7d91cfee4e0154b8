// Counts heap allocations of the whole test process (every thread): operator new and malloc & co.
// Not available under sanitizers, which own the allocator (alloc_counter_enabled() is false there).
#pragma once
#include <cstdint>

namespace crumb {
struct AllocCount {
  uint64_t news = 0, mallocs = 0;
};
AllocCount alloc_count();
bool alloc_counter_enabled();
}  // namespace crumb
