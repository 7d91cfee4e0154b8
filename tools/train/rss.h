// Resident memory of this process, as the report compares it with the plan.
#pragma once
#include <cstddef>

namespace crumb::train {

// The peak resident memory over the whole process lifetime, in bytes (getrusage).
std::size_t max_rss_bytes();

// The peak resident memory since the last reset_peak_rss(), in bytes. Linux resets the peak (VmHWM) to the
// current resident memory when 5 is written to /proc/self/clear_refs; where that is refused, the peak is
// the lifetime one, an upper bound.
void reset_peak_rss();
std::size_t peak_rss_bytes();

}  // namespace crumb::train
