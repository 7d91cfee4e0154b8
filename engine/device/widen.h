// Mixed precision without a 16-bit row: a node of a 16-bit graph whose op has no row for that dtype on
// the device runs its float32 row on float32 copies. Each 16-bit input is converted into the step's
// workspace before the row runs and each 16-bit output is converted back after it (rounded to nearest
// even), so the row loads 16-bit values, computes in float32 and stores 16-bit values, as a native
// 16-bit kernel does; values of other dtypes (float32 parameters and their gradients, metrics, labels,
// masks) reach it as they are. This is how the CUDA path runs the ops that have no 16-bit kernel yet.
// The copies are workspace, so the plan and the budget count them.
#pragma once
#include <initializer_list>

#include "engine/device/backend.h"

namespace crumb {

// Compiles node n of g (a 16-bit graph) for b by the float32 row `f32`: the CompiledStep runs the
// widened step. max_batch as in compile_step.
CompiledStep compile_widened(Backend& b, const Graph& g, const Node& n, int max_batch, const OpImpl& f32);

// The 16-bit row of an op whose float32 row on the same device computes each sample on its own and
// whose outputs are either all batched or all unbatched sums over the samples (a weight gradient): the
// float32 row runs on slices of the micro-batch, each slice's 16-bit operands converted into the
// workspace as it goes, so the copies are bounded by a slice (at most kWidenSliceBytes, and an eighth of
// the micro-batch unless that is under 32 samples) instead of the whole operands. Unbatched 16-bit inputs (weight copies) are converted
// whole. Later slices add into unbatched outputs. For ops with no metrics and no random state:
// convolutions and linear layers on the CPU, whose kernels are float32 GEMMs.
inline constexpr std::size_t kWidenSliceBytes = std::size_t{1} << 20;
OpImpl widened_in_slices();
// Adds widened_in_slices() as the BF16 and F16 rows of each op on `device`.
void add_widened_in_slices(ImplTable& t, Device device, std::initializer_list<const OpDef*> ops);

}  // namespace crumb
