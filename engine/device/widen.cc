#include "engine/device/widen.h"

#include <algorithm>
#include <vector>

#include "engine/base/align.h"
#include "engine/base/error.h"

namespace crumb {
namespace {

struct WidenState final : OpState {
  const OpImpl* row = nullptr;
  std::unique_ptr<OpState> row_state;
  std::size_t row_workspace = 0;  // at a slice of samples, first in the workspace
  int slice = 0;                  // samples per run of the row (the largest micro-batch: one run)
  bool sums = false;              // the outputs are unbatched: later slices add into them
  struct Operand {
    ValueId value;
    bool output;
    bool half;            // has a float32 copy, at `offset` in the workspace
    std::size_t offset;
  };
  // The node's inputs, then its outputs: the 16-bit ones and (when slicing) the batched ones.
  std::vector<Operand> operands;
  // The step's pointer table with the operands pointed at their copies or slices; sized once, so runs
  // do not allocate.
  std::vector<void*> ptr;
};

// The layout of the workspace at `batch` samples (`slice` per run of the row): the row's own, then one
// float32 copy per 16-bit operand, a slice long if batched.
std::size_t layout(const Graph& g, const Node& n, int batch, int slice, std::size_t row_workspace,
                   std::vector<WidenState::Operand>* operands) {
  std::size_t at = align_up(row_workspace);
  auto add = [&](ValueId id, bool output) {
    const Value& v = g.value(id);
    const bool half = is_half(v.dtype);
    if (!half && !(v.batched && slice < batch)) return;
    if (operands) operands->push_back({id, output, half, at});
    if (half) at += align_up(static_cast<std::size_t>(v.count(std::min(batch, slice))) * sizeof(float));
  };
  for (ValueId v : n.in) add(v, false);
  for (ValueId v : n.out) add(v, true);
  return at;
}

std::unique_ptr<WidenState> prepare_state(Backend& b, const Graph& g, const Node& n, int max_batch, const OpImpl& f32,
                                          int slice) {
  auto s = std::make_unique<WidenState>();
  s->row = &f32;
  s->slice = slice;
  if (f32.prepare) s->row_state = f32.prepare(g, n, slice, b);
  if (f32.workspace) s->row_workspace = f32.workspace(g, n, slice, s->row_state.get());
  s->ptr.assign(g.num_values(), nullptr);
  layout(g, n, max_batch, slice, s->row_workspace, &s->operands);
  return s;
}

void run(const StepArgs& a) {
  WidenState& s = *static_cast<WidenState*>(a.state);
  const Graph& g = *a.graph;
  std::copy(a.ptr, a.ptr + g.num_values(), s.ptr.begin());
  char* ws = static_cast<char*>(a.workspace);
  // The operands' slice [first, first + n): a batched one is addressed there, an unbatched one whole.
  auto at = [&](const WidenState::Operand& o, int first) {
    const Value& v = g.value(o.value);
    return static_cast<char*>(a.ptr[o.value]) + (v.batched ? v.count(first) * dtype_size(v.dtype) : 0);
  };
  auto count = [&](const WidenState::Operand& o, int n) { return static_cast<std::size_t>(g.value(o.value).count(n)); };
  for (const WidenState::Operand& o : s.operands)
    if (o.half && !g.value(o.value).batched) {
      // An output in accumulate mode adds to what it holds.
      if (!o.output || a.accumulate) a.backend->convert(ws + o.offset, DType::F32, at(o, 0), g.value(o.value).dtype, count(o, a.n));
      s.ptr[o.value] = ws + o.offset;
    }
  StepArgs row = a;
  row.ptr = s.ptr.data();
  row.state = s.row_state.get();
  row.workspace = s.row_workspace ? ws : nullptr;
  row.workspace_bytes = s.row_workspace;
  for (int first = 0; first == 0 || first < a.n; first += s.slice) {  // once at n = 0: outputs are still written
    row.n = std::min(s.slice, a.n - first);
    row.accumulate = a.accumulate || (s.sums && first > 0);
    for (const WidenState::Operand& o : s.operands) {
      if (!g.value(o.value).batched) continue;
      if (!o.half) {
        s.ptr[o.value] = at(o, first);
        continue;
      }
      if (!o.output || row.accumulate)
        a.backend->convert(ws + o.offset, DType::F32, at(o, first), g.value(o.value).dtype, count(o, row.n));
      s.ptr[o.value] = ws + o.offset;
    }
    s.row->run(row);
    for (const WidenState::Operand& o : s.operands)
      if (o.output && o.half && g.value(o.value).batched)
        a.backend->convert(at(o, first), g.value(o.value).dtype, ws + o.offset, DType::F32, count(o, row.n));
  }
  for (const WidenState::Operand& o : s.operands)
    if (o.output && o.half && !g.value(o.value).batched)
      a.backend->convert(at(o, 0), g.value(o.value).dtype, ws + o.offset, DType::F32, count(o, a.n));
}

// Commits read and write the node's totals (float32 and float64), which have no copies.
void commit(const StepArgs& a) {
  const WidenState& s = *static_cast<const WidenState*>(a.state);
  StepArgs row = a;
  row.state = s.row_state.get();
  s.row->commit(row);
}

// ---- widened_in_slices: the OpImpl's three functions.

// Samples per slice: an eighth of the micro-batch but at least kMinSliceSamples, and no more than
// kWidenSliceBytes of copies. The floor keeps a linear layer's slice a matrix product: at 8 rows and
// fewer, the kernel computes it a row at a time (kernels/cpu/kernel_util.h, kGemvMaxRows).
constexpr int kMinSliceSamples = 32;
int slice_samples(const Graph& g, const Node& n, int max_batch) {
  std::size_t per_sample = 0;
  for (const std::vector<ValueId>* vs : {&n.in, &n.out})
    for (ValueId id : *vs) {
      const Value& v = g.value(id);
      if (is_half(v.dtype) && v.batched) per_sample += static_cast<std::size_t>(v.count(1)) * sizeof(float);
    }
  const int by_bytes = per_sample ? static_cast<int>(std::max<std::size_t>(1, kWidenSliceBytes / per_sample)) : max_batch;
  return std::max(1, std::min({max_batch, std::max(kMinSliceSamples, (max_batch + 7) / 8), by_bytes}));
}

std::unique_ptr<OpState> prepare_sliced(const Graph& g, const Node& n, int max_batch, Backend& b) {
  const OpImpl* f32 = impl_table().find(*n.def, b.device(), DType::F32);
  CRUMB_CHECK(f32 && !f32->commit && !n.def->random, n.def->name, " has no float32 row of per-sample work to widen");
  bool batched = false, unbatched = false;
  for (ValueId v : n.out) (g.value(v).batched ? batched : unbatched) = true;
  CRUMB_CHECK(!(batched && unbatched), n.def->name, " mixes batched and unbatched outputs, so it cannot run in slices");
  auto s = prepare_state(b, g, n, max_batch, *f32, slice_samples(g, n, max_batch));
  s->sums = unbatched;
  return s;
}

std::size_t workspace_sliced(const Graph& g, const Node& n, int batch, const OpState* state) {
  const WidenState& s = *static_cast<const WidenState*>(state);
  return layout(g, n, batch, s.slice, s.row_workspace, nullptr);
}

}  // namespace

CompiledStep compile_widened(Backend& b, const Graph& g, const Node& n, int max_batch, const OpImpl& f32) {
  auto s = prepare_state(b, g, n, max_batch, f32, max_batch);
  CompiledStep c;
  c.workspace = layout(g, n, max_batch, max_batch, s->row_workspace, nullptr);
  c.fn = run;
  c.commit = f32.commit ? commit : nullptr;
  c.state = std::move(s);
  return c;
}

OpImpl widened_in_slices() { return OpImpl(run).with_prepare(prepare_sliced).with_workspace(workspace_sliced); }

void add_widened_in_slices(ImplTable& t, Device device, std::initializer_list<const OpDef*> ops) {
  for (const OpDef* op : ops)
    for (DType dtype : {DType::BF16, DType::F16}) t.add(*op, device, dtype, widened_in_slices());
}

}  // namespace crumb
