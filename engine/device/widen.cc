#include "engine/device/widen.h"

#include <algorithm>
#include <vector>

#include "engine/base/align.h"

namespace crumb {
namespace {

struct WidenState final : OpState {
  const OpImpl* row = nullptr;
  std::unique_ptr<OpState> row_state;
  std::size_t row_workspace = 0;  // at the largest micro-batch, first in the workspace
  struct Copy {
    ValueId value;
    bool output;
    std::size_t offset;  // of its float32 copy in the workspace
  };
  std::vector<Copy> copies;  // the node's 16-bit inputs, then its 16-bit outputs
  // The step's pointer table with the 16-bit values pointed at their copies; sized once, so runs do not
  // allocate.
  std::vector<void*> ptr;
};

std::size_t count_at(const Value& v, int n) { return static_cast<std::size_t>(v.count(n)); }

// The layout of the workspace at `batch` samples: the row's own, then one float32 copy per 16-bit value.
std::size_t layout(const Graph& g, const Node& n, int batch, std::size_t row_workspace,
                   std::vector<WidenState::Copy>* copies) {
  std::size_t at = align_up(row_workspace);
  auto add = [&](ValueId v, bool output) {
    if (!is_half(g.value(v).dtype)) return;
    if (copies) copies->push_back({v, output, at});
    at += align_up(count_at(g.value(v), batch) * sizeof(float));
  };
  for (ValueId v : n.in) add(v, false);
  for (ValueId v : n.out) add(v, true);
  return at;
}

void run(const StepArgs& a) {
  WidenState& s = *static_cast<WidenState*>(a.state);
  const Graph& g = *a.graph;
  std::copy(a.ptr, a.ptr + g.num_values(), s.ptr.begin());
  char* ws = static_cast<char*>(a.workspace);
  for (const WidenState::Copy& c : s.copies) {
    const Value& v = g.value(c.value);
    // An output in accumulate mode adds to what it holds.
    if (!c.output || a.accumulate) a.backend->convert(ws + c.offset, DType::F32, a.ptr[c.value], v.dtype, count_at(v, a.n));
    s.ptr[c.value] = ws + c.offset;
  }
  StepArgs row = a;
  row.ptr = s.ptr.data();
  row.state = s.row_state.get();
  row.workspace = s.row_workspace ? ws : nullptr;
  row.workspace_bytes = s.row_workspace;
  s.row->run(row);
  for (const WidenState::Copy& c : s.copies)
    if (c.output) {
      const Value& v = g.value(c.value);
      a.backend->convert(a.ptr[c.value], v.dtype, ws + c.offset, DType::F32, count_at(v, a.n));
    }
}

// Commits read and write the node's totals (float32 and float64), which have no copies.
void commit(const StepArgs& a) {
  const WidenState& s = *static_cast<const WidenState*>(a.state);
  StepArgs row = a;
  row.state = s.row_state.get();
  s.row->commit(row);
}

}  // namespace

CompiledStep compile_widened(Backend& b, const Graph& g, const Node& n, int max_batch, const OpImpl& f32) {
  auto s = std::make_unique<WidenState>();
  s->row = &f32;
  if (f32.prepare) s->row_state = f32.prepare(g, n, max_batch, b);
  if (f32.workspace) s->row_workspace = f32.workspace(g, n, max_batch, s->row_state.get());
  s->ptr.assign(g.num_values(), nullptr);
  CompiledStep c;
  c.workspace = layout(g, n, max_batch, s->row_workspace, &s->copies);
  c.fn = run;
  c.commit = f32.commit ? commit : nullptr;
  c.state = std::move(s);
  return c;
}

}  // namespace crumb
