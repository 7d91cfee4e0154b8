#include "tests/alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<uint64_t> g_news{0}, g_mallocs{0};
}

namespace crumb {
AllocCount alloc_count() { return {g_news.load(), g_mallocs.load()}; }
}  // namespace crumb

void* operator new(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
namespace crumb {
bool alloc_counter_counts_malloc() { return false; }
}  // namespace crumb
#else
// glibc lets a program interpose malloc; these forward to glibc's own implementation.
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* malloc(std::size_t n) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(std::size_t a, std::size_t b) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(a, b);
}
void* realloc(void* p, std::size_t n) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t a, std::size_t n) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, std::size_t a, std::size_t n) {
  g_mallocs.fetch_add(1, std::memory_order_relaxed);
  *out = __libc_memalign(a, n);
  return *out ? 0 : 12;
}
}
namespace crumb {
bool alloc_counter_counts_malloc() { return true; }
}  // namespace crumb
#endif
