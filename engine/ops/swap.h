// The ops a swap schedule adds (engine/strategy/swap.h): swap_copy moves a value between the arena and the
// host pool, swap_wait holds later work until that copy is done.
#pragma once
#include "engine/graph/op.h"

namespace crumb {

extern const OpDef kSwapCopy, kSwapWait;

// A copy between the arena and the host pool: its ticket in the executor's CopyQueue.
struct SwapAttrs {
  int ticket = 0;
};

}  // namespace crumb
