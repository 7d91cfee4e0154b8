// The ops the graph inserts on its own: `add` sums a value's gradient contributions (autograd), `cast`
// converts a float32 input to a mixed-precision graph's float dtype (Graph::input) and `cast_master` a
// gradient back to the master dtype. Declared and defined here, with their shape and backward rules, so
// the graph needs nothing above it; their rows (CPU, CUDA) are the elementwise family's
// (engine/ops/elementwise.cc), which also builds `add` for users (nn::add).
#pragma once

#include "engine/graph/op.h"

namespace crumb {

extern const OpDef kAdd, kCast, kCastMaster;

}  // namespace crumb
