// Mixed precision without a 16-bit row: a node of a 16-bit graph whose op has no row for that dtype on
// the device runs its float32 row on float32 copies. Each 16-bit input is converted into the step's
// workspace before the row runs and each 16-bit output is converted back after it (rounded to nearest
// even), so the row loads 16-bit values, computes in float32 and stores 16-bit values, as a native
// 16-bit kernel does; values of other dtypes (float32 parameters and their gradients, metrics, labels,
// masks) reach it as they are. This is how every op trains in bf16 and fp16 on the CPU, and the CUDA
// path of the ops that have no 16-bit kernel yet. The copies are workspace, so the plan and the budget
// count them.
#pragma once
#include "engine/device/backend.h"

namespace crumb {

// Compiles node n of g (a 16-bit graph) for b by the float32 row `f32`: the CompiledStep runs the
// widened step. max_batch as in compile_step.
CompiledStep compile_widened(Backend& b, const Graph& g, const Node& n, int max_batch, const OpImpl& f32);

}  // namespace crumb
