// Rows run on converted copies of their operands. Three cases share the mechanism:
// - Mixed precision without a 16-bit row: a node of a 16-bit graph whose op has no row for that dtype on
//   the device runs its float32 row on float32 copies. Each 16-bit input is converted into the step's
//   workspace before the row runs and each 16-bit output is converted back after it (rounded to nearest
//   even), so the row loads 16-bit values, computes in float32 and stores 16-bit values, as a native
//   16-bit kernel does; values of other dtypes (float32 parameters and their gradients, metrics, labels,
//   masks) reach it as they are. This is how the CUDA path runs the ops that have no 16-bit kernel yet.
// - The same in slices of samples (widened_in_slices): the CPU's 16-bit convolutions and linear layers,
//   whose copies are then bounded by a slice instead of covering whole operands.
// - Channels-last without an NHWC row: an NHWC node (engine/plan/layout.h) whose row reads NCHW only
//   runs it on NCHW copies of its NHWC image operands, transposed into the workspace and back, in the
//   same pass as a widening where both apply. Its result is the NCHW row's, bit for bit.
// The copies are workspace, so the plan and the budget count them.
#pragma once
#include <initializer_list>
#include <memory>
#include <vector>

#include "engine/device/backend.h"

namespace crumb {

// Whether v is an image tensor with a layout: batched [C, H, W], or an unbatched [K, C, R, S] filter.
bool is_image(const Value& v);
// v (is_image) at `batch` samples as blocks of channels by positions (kernels/convert.h).
ImageShape image_shape(const Value& v, int batch);
// Whether v's two layouts are the same bytes (one channel, or one position per channel), so that no
// conversion is needed between them.
bool layout_free(const Value& v);

// Compiles node n of g for b by `row`, on float32 copies of its 16-bit operands (widen) and NCHW copies
// of its NHWC image operands (relayout): the CompiledStep runs the adapted step. max_batch as in
// compile_step.
CompiledStep compile_adapted(Backend& b, const Graph& g, const Node& n, int max_batch, const OpImpl& row, bool widen,
                             bool relayout);

// The 16-bit row of an op whose float32 row on the same device computes each sample on its own and
// whose outputs are either all batched or all unbatched sums over the samples (a weight gradient): the
// float32 row runs on slices of the micro-batch, each slice's 16-bit operands converted into the
// workspace as it goes, so the copies are bounded by a slice (at most kWidenSliceBytes, and an eighth of
// the micro-batch unless that is under 32 samples) instead of the whole operands. Unbatched 16-bit inputs
// (weight copies) are converted whole. Later slices add into unbatched outputs. For ops with no metrics
// and no random state: convolutions and linear layers on the CPU, whose kernels are float32 GEMMs.
inline constexpr std::size_t kWidenSliceBytes = std::size_t{1} << 20;
OpImpl widened_in_slices();
// Adds widened_in_slices() as the BF16 and F16 rows of each op on `device`.
void add_widened_in_slices(ImplTable& t, Device device, std::initializer_list<const OpDef*> ops);

// A 16-bit row with a native kernel where the CPU and the node allow it (Applies: its operands' dtypes,
// its shape, the instructions the CPU has), decided per node when the plan is compiled, and another row
// elsewhere (Fallback: widened_in_slices() unless given): Run and Workspace (bytes) for the native
// kernel, the other row's own for the rest.
struct NativeOrFallback : OpState {
  bool native = false;
  OpImpl fallback;
  std::unique_ptr<OpState> fallback_state;
};
template <bool (*Applies)(const Graph&, const Node&), StepFn Run,
          std::size_t (*Workspace)(const Graph&, const Node&, int batch), OpImpl (*Fallback)() = widened_in_slices>
OpImpl native_or_fallback() {
  auto prepare = [](const Graph& g, const Node& n, int max_batch, Backend& b) -> std::unique_ptr<OpState> {
    auto s = std::make_unique<NativeOrFallback>();
    s->native = Applies(g, n);
    if (!s->native) {
      s->fallback = Fallback();
      if (s->fallback.prepare) s->fallback_state = s->fallback.prepare(g, n, max_batch, b);
    }
    return s;
  };
  auto workspace = [](const Graph& g, const Node& n, int batch, const OpState* state) -> std::size_t {
    const auto& s = *static_cast<const NativeOrFallback*>(state);
    if (s.native) return Workspace(g, n, batch);
    return s.fallback.workspace ? s.fallback.workspace(g, n, batch, s.fallback_state.get()) : 0;
  };
  auto run = [](const StepArgs& a) {
    const auto& s = *static_cast<const NativeOrFallback*>(a.state);
    if (s.native) return Run(a);
    StepArgs row = a;
    row.state = s.fallback_state.get();
    s.fallback.run(row);
  };
  return OpImpl(run).with_prepare(prepare).with_workspace(workspace);
}
// Whether every value of `values` has dtype `dtype` (a native row's operands).
bool all_of_dtype(const Graph& g, const std::vector<ValueId>& values, DType dtype);

}  // namespace crumb
