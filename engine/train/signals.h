// SIGINT and SIGTERM during training: the first one is noted and the run stops after the optimizer step
// in progress (saving --save first), so no work is lost; a second one ends the process at once, as the
// signal's default action would have.
#pragma once

namespace crumb {

// Installs the handlers (for the rest of the process).
void catch_interrupts();
// The signal received since catch_interrupts(), or 0.
int interrupted();

}  // namespace crumb
