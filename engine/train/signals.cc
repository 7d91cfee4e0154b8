#include "engine/train/signals.h"

#include <csignal>
#include <cstdlib>
#include <ctime>

namespace crumb {
namespace {
volatile std::sig_atomic_t g_signal = 0;  // the first signal of a stop
volatile std::sig_atomic_t g_stopping = 0;  // 1 while a run would rather stop than end
volatile std::sig_atomic_t g_saved = 0;   // the stop's save has finished
volatile std::sig_atomic_t g_first_second = 0;

// Seconds on the monotonic clock (clock_gettime is async-signal-safe).
long now_seconds() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<long>(t.tv_sec);
}

[[noreturn]] void end_by(int sig) {
  // Async-signal-safe: restore the default action and deliver the signal again.
  std::signal(sig, SIG_DFL);
  std::raise(sig);
  std::_Exit(128 + sig);
}

void on_signal(int sig) {
  if (!g_stopping) end_by(sig);
  if (!g_signal) {
    g_signal = sig;
    g_first_second = static_cast<std::sig_atomic_t>(now_seconds());
    return;
  }
  if (g_saved || now_seconds() - g_first_second > static_cast<long>(kSignalGraceSeconds)) end_by(sig);
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

StopOnSignal::StopOnSignal() { g_stopping = 1; }
StopOnSignal::~StopOnSignal() {
  g_stopping = 0;
  // A stop noted during the run has been acted on; a later signal ends the process.
  if (g_signal) g_saved = 1;
}
void StopOnSignal::saved() { g_saved = 1; }

}  // namespace crumb
