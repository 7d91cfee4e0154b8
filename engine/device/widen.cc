#include "engine/device/widen.h"

#include <algorithm>
#include <vector>

#include "engine/base/align.h"

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
  std::size_t row_workspace = 0;  // at the largest micro-batch, first in the workspace
  struct Copy {
    ValueId value;
    bool output;
    DType dtype;          // of the copy: float32 where widened, else the value's
    bool transposed;      // the copy is NCHW, the value NHWC
    std::size_t offset;   // of the copy in the workspace
  };
  std::vector<Copy> copies;  // the node's converted inputs, then its converted outputs
  // The step's pointer table with the converted values pointed at their copies; sized once, so runs do
  // not allocate.
  std::vector<void*> ptr;
};

std::size_t count_at(const Value& v, int n) { return static_cast<std::size_t>(v.count(n)); }

// The layout of the workspace at `batch` samples: the row's own, then one copy per converted value.
std::size_t plan_copies(const Graph& g, const Node& n, int batch, std::size_t row_workspace, bool widen, bool relayout,
                        std::vector<AdaptState::Copy>* copies) {
  std::size_t at = align_up(row_workspace);
  auto add = [&](ValueId id, bool output) {
    const Value& v = g.value(id);
    const bool wide = widen && is_half(v.dtype);
    const bool transposed = relayout && v.layout == Layout::NHWC && is_image(v) && !layout_free(v);
    if (!wide && !transposed) return;
    const DType dtype = wide ? DType::F32 : v.dtype;
    if (copies) copies->push_back({id, output, dtype, transposed, at});
    at += align_up(count_at(v, batch) * dtype_size(dtype));
  };
  for (ValueId v : n.in) add(v, false);
  for (ValueId v : n.out) add(v, true);
  return at;
}

// dst = src between a value and its copy: transposed to `to` where the copy is, else converted.
void move(Backend& b, const Value& v, const AdaptState::Copy& c, int n, void* dst, DType dst_dtype, const void* src,
          DType src_dtype, Layout to, bool accumulate) {
  if (c.transposed)
    b.relayout(dst, dst_dtype, src, src_dtype, image_shape(v, n), to, accumulate);
  else
    b.convert(dst, dst_dtype, src, src_dtype, count_at(v, n), accumulate);
}

void run(const StepArgs& a) {
  AdaptState& s = *static_cast<AdaptState*>(a.state);
  const Graph& g = *a.graph;
  std::copy(a.ptr, a.ptr + g.num_values(), s.ptr.begin());
  char* ws = static_cast<char*>(a.workspace);
  for (const AdaptState::Copy& c : s.copies) {
    const Value& v = g.value(c.value);
    // An output in accumulate mode adds to what it holds.
    if (!c.output || a.accumulate)
      move(*a.backend, v, c, a.n, ws + c.offset, c.dtype, a.ptr[c.value], v.dtype, Layout::NCHW, false);
    s.ptr[c.value] = ws + c.offset;
  }
  StepArgs row = a;
  row.ptr = s.ptr.data();
  row.state = s.row_state.get();
  row.workspace = s.row_workspace ? ws : nullptr;
  row.workspace_bytes = s.row_workspace;
  s.row->run(row);
  for (const AdaptState::Copy& c : s.copies)
    if (c.output) {
      const Value& v = g.value(c.value);
      move(*a.backend, v, c, a.n, a.ptr[c.value], v.dtype, ws + c.offset, c.dtype, Layout::NHWC, false);
    }
}

// Commits read and write the node's totals (float32 and float64 vectors), which have no copies.
void commit(const StepArgs& a) {
  const AdaptState& s = *static_cast<const AdaptState*>(a.state);
  StepArgs row = a;
  row.state = s.row_state.get();
  s.row->commit(row);
}

}  // namespace

CompiledStep compile_adapted(Backend& b, const Graph& g, const Node& n, int max_batch, const OpImpl& row, bool widen,
                             bool relayout) {
  auto s = std::make_unique<AdaptState>();
  s->row = &row;
  if (row.prepare) s->row_state = row.prepare(g, n, max_batch, b);
  if (row.workspace) s->row_workspace = row.workspace(g, n, max_batch, s->row_state.get());
  s->ptr.assign(g.num_values(), nullptr);
  CompiledStep c;
  c.workspace = plan_copies(g, n, max_batch, s->row_workspace, widen, relayout, &s->copies);
  c.fn = run;
  c.commit = row.commit ? commit : nullptr;
  c.state = std::move(s);
  return c;
}

}  // namespace crumb
