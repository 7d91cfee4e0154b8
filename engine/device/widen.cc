#include "engine/device/widen.h"

#include <algorithm>
#include <vector>

#include "engine/base/align.h"
#include "engine/base/error.h"

namespace crumb {

bool is_image(const Value& v) { return v.batched ? v.dims.size() == 3 : v.dims.size() == 4; }

ImageShape image_shape(const Value& v, int batch) {
  if (v.batched) return {batch, v.dims[0], v.dims[1] * v.dims[2]};
  return {v.dims[0], v.dims[1], v.dims[2] * v.dims[3]};
}

bool layout_free(const Value& v) {
  const ImageShape s = image_shape(v, 1);
  return s.c == 1 || s.s == 1;
}

namespace {

struct AdaptState final : OpState {
  const OpImpl* row = nullptr;
  std::unique_ptr<OpState> row_state;
  std::size_t row_workspace = 0;  // at a slice of samples, first in the workspace
  int slice = 0;                  // samples per run of the row (the largest micro-batch: one run)
  bool sums = false;              // the outputs are unbatched: later slices add into them
  bool widen = false, relayout = false;
  struct Operand {
    ValueId value;
    bool output;
    bool copied;          // has a copy at `offset` in the workspace (else: addressed in place, per slice)
    DType dtype;          // of the copy: float32 where widened, else the value's
    bool transposed;      // the copy is NCHW, the value NHWC
    std::size_t offset;
  };
  // The node's inputs, then its outputs: the converted ones and (when slicing) the batched ones.
  std::vector<Operand> operands;
  // The step's pointer table with the operands pointed at their copies or slices; sized once, so runs
  // do not allocate.
  std::vector<void*> ptr;
};

std::size_t count_at(const Value& v, int n) { return static_cast<std::size_t>(v.count(n)); }

// The layout of the workspace at `batch` samples (`slice` per run of the row): the row's own, then one
// copy per converted operand, a slice long if batched.
std::size_t layout(const Graph& g, const Node& n, int batch, const AdaptState& s,
                   std::vector<AdaptState::Operand>* operands) {
  std::size_t at = align_up(s.row_workspace);
  auto add = [&](ValueId id, bool output) {
    const Value& v = g.value(id);
    const bool wide = s.widen && is_half(v.dtype);
    const bool transposed = s.relayout && v.layout == Layout::NHWC && is_image(v) && !layout_free(v);
    const bool copied = wide || transposed;
    if (!copied && !(v.batched && s.slice < batch)) return;
    const DType dtype = wide ? DType::F32 : v.dtype;
    if (operands) operands->push_back({id, output, copied, dtype, transposed, at});
    if (copied) at += align_up(count_at(v, std::min(batch, s.slice)) * dtype_size(dtype));
  };
  for (ValueId v : n.in) add(v, false);
  for (ValueId v : n.out) add(v, true);
  return at;
}

// dst = src between a value and its copy: transposed to `to` where the copy is, else converted.
void move(Backend& b, const Value& v, const AdaptState::Operand& o, int n, void* dst, DType dst_dtype,
          const void* src, DType src_dtype, Layout to) {
  if (o.transposed)
    b.relayout(dst, dst_dtype, src, src_dtype, image_shape(v, n), to, false);
  else
    b.convert(dst, dst_dtype, src, src_dtype, count_at(v, n), false);
}

std::unique_ptr<AdaptState> prepare_state(Backend& b, const Graph& g, const Node& n, int max_batch, const OpImpl& row,
                                          int slice, bool widen, bool relayout) {
  auto s = std::make_unique<AdaptState>();
  s->row = &row;
  s->slice = slice;
  s->widen = widen;
  s->relayout = relayout;
  if (row.prepare) s->row_state = row.prepare(g, n, slice, b);
  if (row.workspace) s->row_workspace = row.workspace(g, n, slice, s->row_state.get());
  s->ptr.assign(g.num_values(), nullptr);
  layout(g, n, max_batch, *s, &s->operands);
  return s;
}

void run(const StepArgs& a) {
  AdaptState& s = *static_cast<AdaptState*>(a.state);
  const Graph& g = *a.graph;
  Backend& b = *a.backend;
  std::copy(a.ptr, a.ptr + g.num_values(), s.ptr.begin());
  char* ws = static_cast<char*>(a.workspace);
  // The operands' slice [first, first + n): a batched one is addressed there, an unbatched one whole.
  auto at = [&](const AdaptState::Operand& o, int first) {
    const Value& v = g.value(o.value);
    return static_cast<char*>(a.ptr[o.value]) + (v.batched ? v.count(first) * dtype_size(v.dtype) : 0);
  };
  for (const AdaptState::Operand& o : s.operands) {
    const Value& v = g.value(o.value);
    if (!o.copied || v.batched) continue;
    // An output in accumulate mode adds to what it holds.
    if (!o.output || a.accumulate) move(b, v, o, a.n, ws + o.offset, o.dtype, at(o, 0), v.dtype, Layout::NCHW);
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
    for (const AdaptState::Operand& o : s.operands) {
      const Value& v = g.value(o.value);
      if (!v.batched) continue;
      if (!o.copied) {
        s.ptr[o.value] = at(o, first);
        continue;
      }
      if (!o.output || row.accumulate)
        move(b, v, o, row.n, ws + o.offset, o.dtype, at(o, first), v.dtype, Layout::NCHW);
      s.ptr[o.value] = ws + o.offset;
    }
    s.row->run(row);
    for (const AdaptState::Operand& o : s.operands) {
      const Value& v = g.value(o.value);
      if (o.output && o.copied && v.batched) move(b, v, o, row.n, at(o, first), v.dtype, ws + o.offset, o.dtype, Layout::NHWC);
    }
  }
  for (const AdaptState::Operand& o : s.operands) {
    const Value& v = g.value(o.value);
    if (o.output && o.copied && !v.batched) move(b, v, o, a.n, at(o, 0), v.dtype, ws + o.offset, o.dtype, Layout::NHWC);
  }
}

// Commits read and write the node's totals (float32 and float64 vectors), which have no copies.
void commit(const StepArgs& a) {
  const AdaptState& s = *static_cast<const AdaptState*>(a.state);
  StepArgs row = a;
  row.state = s.row_state.get();
  s.row->commit(row);
}

// ---- widened_in_slices: the OpImpl's three functions.

// Samples per slice: an eighth of the micro-batch but at least kMinSliceSamples, and no more than
// kWidenSliceBytes of copies. The floor keeps a linear layer's slice a matrix product: with a few
// samples its register tiles (kernels/cpu/ordered_gemm.h) sit mostly empty, and the data gradient
// repacks the whole weight for each slice.
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
  auto s = prepare_state(b, g, n, max_batch, *f32, slice_samples(g, n, max_batch), true, false);
  s->sums = unbatched;
  return s;
}

std::size_t workspace_sliced(const Graph& g, const Node& n, int batch, const OpState* state) {
  return layout(g, n, batch, *static_cast<const AdaptState*>(state), nullptr);
}

}  // namespace

CompiledStep compile_adapted(Backend& b, const Graph& g, const Node& n, int max_batch, const OpImpl& row, bool widen,
                             bool relayout) {
  auto s = prepare_state(b, g, n, max_batch, row, max_batch, widen, relayout);
  CompiledStep c;
  c.workspace = layout(g, n, max_batch, *s, nullptr);
  c.fn = run;
  c.commit = row.commit ? commit : nullptr;
  c.state = std::move(s);
  return c;
}

OpImpl widened_in_slices() { return OpImpl(run).with_prepare(prepare_sliced).with_workspace(workspace_sliced); }

bool all_of_dtype(const Graph& g, const std::vector<ValueId>& values, DType dtype) {
  return std::all_of(values.begin(), values.end(), [&](ValueId v) { return g.value(v).dtype == dtype; });
}

void add_widened_in_slices(ImplTable& t, Device device, std::initializer_list<const OpDef*> ops) {
  for (const OpDef* op : ops)
    for (DType dtype : {DType::BF16, DType::F16}) t.add(*op, device, dtype, widened_in_slices());
}

}  // namespace crumb
