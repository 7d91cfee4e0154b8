// SIGINT and SIGTERM. While a run trains (StopOnSignal), the first one is noted and the run stops at the
// next safe point, the end of the optimizer step in progress, and saves --save before it exits: no work is
// lost. Copies of it that arrive together (a terminal signals the whole process group, `timeout` and
// mpirun forward the signal again) are the same request; a later signal forces the exit only once the
// stop's save has finished, or kSignalGraceSeconds after the first (a step that will not end). A run
// covers the save after a failure too. Outside training (planning, loading data, --explain, writing the
// summary) there is nothing to save, and the first signal ends the process at once, by that signal, as
// its default action would. Each run starts afresh.
#pragma once
#include <csignal>

namespace crumb {

inline constexpr double kSignalGraceSeconds = 10;

// Installs the handlers (for the rest of the process), ending the process at the first signal.
void catch_interrupts();
// The signal a training run was asked to stop by, or 0.
int interrupted();

// For the lifetime of one run in a host that keeps SIGINT for itself (Python's KeyboardInterrupt): SIGTERM,
// where its action is still the default, is caught as catch_interrupts catches it (a stop, and a later
// one ends the process as above); its previous action is back afterwards.
class CatchTerminate {
 public:
  CatchTerminate();
  ~CatchTerminate();
  CatchTerminate(const CatchTerminate&) = delete;
  CatchTerminate& operator=(const CatchTerminate&) = delete;

 private:
  bool installed_ = false;
  struct sigaction previous_ {};
};

// Training: from construction to destruction, a signal asks the run to stop (interrupted()) instead of
// ending the process. Once the run has saved after a stop, saved() lets a further signal end it at once.
// interrupted() is 0 again after it.
class StopOnSignal {
 public:
  StopOnSignal();
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;
  void saved();
};

}  // namespace crumb
