// Registration where a thing is defined: an op's rows, a device's backend, an optimizer's kernels add
// themselves to their table from their own file when the library loads, so adding one edits no central
// list. The tables are function-local statics, so the order in which files load does not matter; they
// are only read after main() has started. (The library is shared for this: a static archive would drop
// the object files that nothing references.)
#pragma once

#define CRUMB_ON_LOAD_CAT2(a, b) a##b
#define CRUMB_ON_LOAD_CAT(a, b) CRUMB_ON_LOAD_CAT2(a, b)
// CRUMB_ON_LOAD { ... } runs the block once, at load time.
#define CRUMB_ON_LOAD                                                                                   \
  static void CRUMB_ON_LOAD_CAT(crumb_on_load_, __LINE__)();                                            \
  [[maybe_unused]] static const bool CRUMB_ON_LOAD_CAT(crumb_loaded_, __LINE__) =                       \
      (CRUMB_ON_LOAD_CAT(crumb_on_load_, __LINE__)(), true);                                            \
  static void CRUMB_ON_LOAD_CAT(crumb_on_load_, __LINE__)()
