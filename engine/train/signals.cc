#include "engine/train/signals.h"

#include <csignal>

namespace crumb {
namespace {
volatile std::sig_atomic_t g_signal = 0;

void on_signal(int sig) {
  g_signal = sig;
  // Async-signal-safe: only the flag above and signal() itself. The next one gets the default action.
  std::signal(sig, SIG_DFL);
}
}  // namespace

void catch_interrupts() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

int interrupted() { return g_signal; }

}  // namespace crumb
