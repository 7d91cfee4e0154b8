// Resident memory of this process, as the report compares it with the plan.
#pragma once
#include <cstddef>

namespace crumb {

// The peak resident memory over the whole process lifetime, in bytes (getrusage).
std::size_t max_rss_bytes();

// How much the resident memory grows, at its peak, over what the process held when the watch started:
// what a piece of work (a trial, a training run) allocates and touches, without the program and the
// dataset. Starting a watch hands freed heap memory back to the system first (malloc_trim), so memory a
// finished trial freed is not counted as already held, and resets the peak (Linux: 5 written to
// /proc/self/clear_refs resets VmHWM; where that is refused the peak is the lifetime one, an upper bound).
class RssGrowth {
 public:
  RssGrowth();
  std::size_t peak_bytes() const;  // peak resident memory since the start, less the start's

 private:
  std::size_t start_ = 0;
};

}  // namespace crumb
