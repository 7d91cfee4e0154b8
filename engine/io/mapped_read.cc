#include "engine/io/mapped_read.h"

#include <signal.h>

#include <mutex>

namespace crumb::mapped_read_detail {
namespace {

// The guard of the thread's read in progress, or null. Set before the read starts, so the handler never
// allocates this thread's storage.
thread_local Guard* current = nullptr;

std::mutex install_mu;
int readers = 0;  // threads inside read_mapped; the handler is installed while > 0
struct sigaction previous;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  Guard* g = current;
  const char* at = static_cast<const char*>(info->si_addr);
  if (g && at >= g->begin && at < g->end) siglongjmp(g->jump, 1);
  // Not a read we guard: what would have happened without us.
  if (previous.sa_flags & SA_SIGINFO) {
    previous.sa_sigaction(sig, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
  } else {
    // The faulting instruction runs again on return and the default action ends the process (a fault
    // cannot be ignored).
    signal(SIGBUS, SIG_DFL);
  }
}

}  // namespace

void enter(Guard* g) {
  {
    std::lock_guard<std::mutex> lock(install_mu);
    if (readers++ == 0) {
      struct sigaction ours {};
      ours.sa_sigaction = on_sigbus;
      ours.sa_flags = SA_SIGINFO | SA_NODEFER;
      sigemptyset(&ours.sa_mask);
      sigaction(SIGBUS, &ours, &previous);
    }
  }
  g->outer = current;
  current = g;
}

void leave(Guard* g) {
  current = g->outer;
  std::lock_guard<std::mutex> lock(install_mu);
  if (--readers == 0) sigaction(SIGBUS, &previous, nullptr);
}

}  // namespace crumb::mapped_read_detail
