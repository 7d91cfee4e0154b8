#include "engine/train/signals.h"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <ctime>

namespace crumb {
namespace {
// Lock-free atomics are async-signal-safe, and copies of one signal run their handlers at the same moment
// on different threads (Linux hands a signal to another thread while one is pending on the first).
std::atomic<int> g_signal{0};        // the first signal of a stop
std::atomic<bool> g_stopping{false};  // while a run would rather stop than end
std::atomic<bool> g_saved{false};     // the stop's save has finished
std::atomic<long> g_first_second{0};  // when the stop was asked for
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free &&
              std::atomic<long>::is_always_lock_free);

// Seconds on the monotonic clock (clock_gettime is async-signal-safe).
long now_seconds() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<long>(t.tv_sec);
}

[[noreturn]] void end_by(int sig) {
  // Async-signal-safe: restore the default action and deliver the signal again, unblocked (a handler runs
  // with its signal blocked, which would leave it pending): the process ends by it, as a shell expects.
  std::signal(sig, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
  std::raise(sig);
  std::_Exit(128 + sig);
}

void on_signal(int sig) {
  if (!g_stopping) end_by(sig);
  const long now = now_seconds();
  // The time is stored before the signal is: a copy that finds the signal noted also finds its time.
  if (g_signal == 0) {
    g_first_second = now;
    int none = 0;
    if (g_signal.compare_exchange_strong(none, sig)) return;
  }
  if (g_saved || now - g_first_second > static_cast<long>(kSignalGraceSeconds)) end_by(sig);
}

void install(int sig) {
  struct sigaction a {};
  a.sa_handler = on_signal;
  sigemptyset(&a.sa_mask);
  a.sa_flags = SA_RESTART;
  sigaction(sig, &a, nullptr);
}
}  // namespace

void catch_interrupts() {
  install(SIGINT);
  install(SIGTERM);
}

int interrupted() { return g_signal; }

CatchTerminate::CatchTerminate() {
  if (sigaction(SIGTERM, nullptr, &previous_) != 0) return;
  if ((previous_.sa_flags & SA_SIGINFO) || previous_.sa_handler != SIG_DFL) return;
  install(SIGTERM);
  installed_ = true;
}
CatchTerminate::~CatchTerminate() {
  if (installed_) sigaction(SIGTERM, &previous_, nullptr);
}

// Each run starts afresh: a stop noted by the last one was acted on, and a later signal outside a run
// ends the process.
StopOnSignal::StopOnSignal() {
  g_signal = 0;
  g_saved = false;
  g_stopping = true;
}
StopOnSignal::~StopOnSignal() {
  g_stopping = false;
  g_signal = 0;
}
void StopOnSignal::saved() { g_saved = true; }

}  // namespace crumb
