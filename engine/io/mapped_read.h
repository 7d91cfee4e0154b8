// Reading memory that a file is mapped to without dying when the file is cut short underneath: a page
// past the file's new end raises SIGBUS on the reading thread, which would end the process with no error
// line, no save and no rescue file. read_mapped turns that SIGBUS into a return value.
//
// How: while any thread is inside read_mapped, a SIGBUS handler is installed (the previous disposition is
// restored when the last one leaves). A fault on a thread inside read_mapped at an address of the range it
// guards jumps back (siglongjmp) to its read_mapped, which returns false. Any other SIGBUS goes to the
// previous disposition, so a bug elsewhere still crashes as it would have. Each thread has its own guard
// (thread_local), so the loader's worker, OpenMP threads and other loaders may each guard their reads.
#pragma once
#include <csetjmp>
#include <cstddef>

namespace crumb {

namespace mapped_read_detail {
struct Guard {
  sigjmp_buf jump;
  const char* begin;
  const char* end;
  Guard* outer;  // the thread's guard around this one (nested reads), or null
};
void enter(Guard* g);
void leave(Guard* g);
}  // namespace mapped_read_detail

// Runs read(), which reads memory in [begin, begin + size) mapped from a file, and returns whether it
// finished: false if the file was truncated under the range meanwhile. read() is left by siglongjmp when
// that happens, so it may only read the range and write plain memory: no allocation, no lock, no
// exception, nothing with a destructor.
template <class Read>
bool read_mapped(const void* begin, std::size_t size, Read&& read) {
  mapped_read_detail::Guard g;
  g.begin = static_cast<const char*>(begin);
  g.end = g.begin + size;
  mapped_read_detail::enter(&g);
  // savemask 0: no sigprocmask call per read; the handler runs with SA_NODEFER, so SIGBUS is not left
  // blocked by the jump.
  if (sigsetjmp(g.jump, 0) != 0) {
    mapped_read_detail::leave(&g);
    return false;
  }
  read();
  mapped_read_detail::leave(&g);
  return true;
}

}  // namespace crumb
