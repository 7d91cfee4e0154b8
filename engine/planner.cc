#include "engine/planner.h"

#include <algorithm>
#include <numeric>

#include "engine/error.h"
#include "engine/ops/op.h"

namespace crumb {
namespace {

// Storage groups: values that share one buffer (views, in-place results).
struct Groups {
  std::vector<int> parent;
  explicit Groups(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int v) { return parent[v] == v ? v : parent[v] = find(parent[v]); }
};

bool in_arena(const Graph& g, ValueId v) { return g.value(g.storage_root(v)).kind == ValueKind::Activation; }

}  // namespace

MemoryPlan plan_memory(const Graph& g, const std::vector<NodeId>& order, int batch, const std::vector<ValueId>& keep) {
  CRUMB_CHECK(batch >= 1, "plan_memory: batch must be >= 1, got ", batch);
  const int nv = g.num_values(), ns = static_cast<int>(order.size());
  MemoryPlan p;
  p.order = order;
  p.offset.assign(nv, -1);
  p.first.assign(nv, -1);
  p.last.assign(nv, -1);
  std::vector<std::size_t> bytes(nv, 0);

  for (int s = 0; s < ns; ++s) {
    const Node& n = g.node(order[s]);
    for (ValueId v : n.out) {
      if (!in_arena(g, v)) continue;
      p.first[v] = p.last[v] = s;
      bytes[v] = align_up(static_cast<std::size_t>(g.value(v).count(batch)) * dtype_size(g.value(v).dtype));
    }
    for (ValueId v : n.in) {
      if (!in_arena(g, v)) continue;
      CRUMB_CHECK(p.first[v] >= 0, "plan_memory: step ", s, " (layer '", n.name, "') reads '", g.value(v).name,
                  "' before it is computed");
      p.last[v] = s;
    }
    const std::size_t ws = n.def->workspace_bytes ? align_up(n.def->workspace_bytes(g, n, batch)) : 0;
    p.step_workspace.push_back(ws);
    p.workspace_bytes = std::max(p.workspace_bytes, ws);
  }
  for (ValueId v : keep)
    if (p.first[v] >= 0) p.last[v] = ns - 1;

  // Group lifetimes and sizes; views always join their base, in-place outputs join a dead input.
  Groups grp(nv);
  std::vector<int> gfirst(p.first), glast(p.last);
  std::vector<std::size_t> gbytes(bytes);
  auto join = [&](ValueId a, ValueId b) {  // b's group into a's
    const int ra = grp.find(a), rb = grp.find(b);
    if (ra == rb) return;
    grp.parent[rb] = ra;
    gfirst[ra] = std::min(gfirst[ra], gfirst[rb]);
    glast[ra] = std::max(glast[ra], glast[rb]);
    gbytes[ra] = std::max(gbytes[ra], gbytes[rb]);
  };
  // Only a view's own last use extends its base; compute views first so in-place checks see them.
  for (int s = 0; s < ns; ++s) {
    const Node& n = g.node(order[s]);
    if (n.def->view && in_arena(g, n.out[0])) join(n.in[0], n.out[0]);
  }
  for (int s = 0; s < ns; ++s) {
    const Node& n = g.node(order[s]);
    if (!n.def->inplace || !in_arena(g, n.in[0]) || !in_arena(g, n.out[0])) continue;
    const int r = grp.find(n.in[0]);
    if (glast[r] == s && gbytes[r] >= bytes[n.out[0]] && grp.find(n.out[0]) != r) join(n.in[0], n.out[0]);
  }

  std::vector<int> roots;
  for (ValueId v = 0; v < nv; ++v)
    if (p.first[v] >= 0 && grp.find(v) == v) roots.push_back(v);
  std::stable_sort(roots.begin(), roots.end(), [&](int a, int b) { return gbytes[a] > gbytes[b]; });

  struct Placed {
    std::size_t offset, bytes;
    int first, last;
  };
  std::vector<Placed> placed;
  std::vector<int64_t> goffset(nv, -1);
  std::vector<Placed> overlapping;
  for (int r : roots) {
    overlapping.clear();
    for (const Placed& q : placed)
      if (q.first <= glast[r] && gfirst[r] <= q.last) overlapping.push_back(q);
    std::sort(overlapping.begin(), overlapping.end(), [](const Placed& a, const Placed& b) { return a.offset < b.offset; });
    std::size_t at = 0;  // lowest offset whose gap fits
    for (const Placed& q : overlapping) {
      if (q.offset >= at + gbytes[r]) break;
      at = std::max(at, q.offset + q.bytes);
    }
    goffset[r] = static_cast<int64_t>(at);
    placed.push_back({at, gbytes[r], gfirst[r], glast[r]});
    p.arena_bytes = std::max(p.arena_bytes, at + gbytes[r]);
  }
  for (ValueId v = 0; v < nv; ++v)
    if (p.first[v] >= 0) p.offset[v] = goffset[grp.find(v)];

  p.live_bytes.assign(ns, 0);
  for (int r : roots)
    for (int s = gfirst[r]; s <= glast[r]; ++s) p.live_bytes[s] += gbytes[r];
  for (std::size_t b : p.live_bytes) p.lower_bound = std::max(p.lower_bound, b);
  return p;
}

}  // namespace crumb
