#include "engine/plan/planner.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <queue>

#include "engine/base/error.h"
#include "engine/graph/op.h"
#include "engine/graph/rng.h"

namespace crumb {
namespace {

// Storage groups: values that share one buffer (views, in-place results).
struct Groups {
  std::vector<int> parent;
  explicit Groups(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int v) { return parent[v] == v ? v : parent[v] = find(parent[v]); }
};

bool in_arena(const Graph& g, ValueId v) {
  const ValueKind k = g.value(g.storage_root(v)).kind;
  return k == ValueKind::Activation || (k == ValueKind::ParamGrad && g.step_in_backward());
}

struct Block {
  std::size_t bytes;
  int first, last;  // lifetime in steps
  int root;         // the storage group's root value, or -1 - step for a step's workspace
  std::size_t offset = 0;
};

// Places blocks in the given order, each at an offset where it overlaps no placed block with an
// intersecting lifetime: the lowest such offset (first fit) or the one in the tightest gap (best fit,
// the open-ended top as last resort). Returns the arena size. The placed blocks are kept by offset, so
// each placement is one pass over them (no sort), which the memory strategies' searches repeat hundreds
// of times.
std::size_t place_in_order(std::vector<Block>& blocks, const std::vector<int>& order, bool best_fit) {
  struct Placed {
    std::size_t offset, end;
    int first, last;
  };
  std::vector<Placed> placed;  // by offset
  placed.reserve(order.size());
  std::size_t top = 0;
  for (int i : order) {
    Block& b = blocks[i];
    std::size_t at = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (const Placed& q : placed) {
      if (q.first > b.last || b.first > q.last) continue;
      if (q.offset >= at + b.bytes) {
        if (!best_fit) break;
        if (q.offset - at < best_gap) best_gap = q.offset - at, best = at;
      }
      at = std::max(at, q.end);
    }
    b.offset = best_fit && best != SIZE_MAX ? best : at;
    const Placed q{b.offset, b.offset + b.bytes, b.first, b.last};
    placed.insert(std::upper_bound(placed.begin(), placed.end(), q,
                                   [](const Placed& x, const Placed& y) { return x.offset < y.offset; }),
                  q);
    top = std::max(top, q.end);
  }
  return top;
}

// place_in_order for blocks in order of their first step: each block then overlaps exactly the placed
// blocks still live at its first step, so a sweep over time that keeps the free gaps between live blocks
// (by offset, coalesced, the last one open-ended) places every block as place_in_order would, in time
// that grows with the gaps rather than with the live blocks. Deep chains keep thousands of activations
// live at once but leave few gaps.
std::size_t place_by_first(std::vector<Block>& blocks, const std::vector<int>& order, bool best_fit) {
  constexpr std::size_t kOpen = SIZE_MAX;
  std::map<std::size_t, std::size_t> gaps{{0, kOpen}};  // offset -> bytes
  auto release = [&](const Block& q) {
    auto next = gaps.lower_bound(q.offset);
    std::size_t at = q.offset, bytes = q.bytes;
    if (next != gaps.end() && next->first == at + bytes)
      bytes = next->second == kOpen ? kOpen : bytes + next->second, next = gaps.erase(next);
    if (next != gaps.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == at) {
        prev->second = bytes == kOpen ? kOpen : prev->second + bytes;
        return;
      }
    }
    gaps.emplace(at, bytes);
  };
  auto ends_later = [&](int a, int b) { return blocks[a].last > blocks[b].last; };
  std::priority_queue<int, std::vector<int>, decltype(ends_later)> live(ends_later);
  std::size_t top = 0;
  for (int i : order) {
    Block& b = blocks[i];
    for (; !live.empty() && blocks[live.top()].last < b.first; live.pop()) release(blocks[live.top()]);
    auto fit = gaps.end();
    for (auto g = gaps.begin(); g != gaps.end(); ++g) {
      if (g->second < b.bytes) continue;
      if (!best_fit) {
        fit = g;
        break;
      }
      if (fit == gaps.end() || fit->second == kOpen || (g->second != kOpen && g->second < fit->second)) fit = g;
    }
    b.offset = fit->first;
    const std::size_t rest = fit->second == kOpen ? kOpen : fit->second - b.bytes;
    gaps.erase(fit);
    if (rest) gaps.emplace(b.offset + b.bytes, rest);
    live.push(i);
    top = std::max(top, b.offset + b.bytes);
  }
  return top;
}

// Greedy placement is a heuristic: try several block orders (by size, by lifetime, by size x lifetime,
// by first step, then seeded random restarts) with both gap policies, and keep the smallest arena. One
// placement in an order other than by first step costs O(blocks^2), so those are capped by a work
// budget: all 48 restarts for the reference models (a few dozen blocks, well under a millisecond), none
// past ~300 blocks, where the four sorted orders alone already reach the lower bound on deep residual
// stacks (tools/bench/plan_bench); past kQuadraticBlocks (twice ResNet-50's training graph with recomputed copies) only
// the sweep by first step, so that a description of a hundred thousand layers plans in seconds.
std::size_t place_blocks(std::vector<Block>& blocks) {
  auto length = [](const Block& b) { return static_cast<std::size_t>(b.last - b.first + 1); };
  const std::vector<std::function<bool(const Block&, const Block&)>> orders = {
      [](const Block& a, const Block& b) { return a.bytes > b.bytes; },
      [&](const Block& a, const Block& b) { return length(a) != length(b) ? length(a) > length(b) : a.bytes > b.bytes; },
      [&](const Block& a, const Block& b) { return a.bytes * length(a) > b.bytes * length(b); },
      [](const Block& a, const Block& b) { return a.first != b.first ? a.first < b.first : a.bytes > b.bytes; },
  };
  const std::size_t by_first = orders.size() - 1;
  constexpr std::size_t kQuadraticBlocks = 1024;
  constexpr std::size_t kRestartWork = std::size_t{4} << 20;   // blocks^2 summed over the restarts
  const std::size_t per_restart = std::max<std::size_t>(1, blocks.size() * blocks.size());
  const bool quadratic = blocks.size() <= kQuadraticBlocks;
  const int kRandomRestarts = quadratic ? static_cast<int>(std::min<std::size_t>(48, kRestartWork / per_restart)) : 0;
  std::size_t best = SIZE_MAX;
  std::vector<std::size_t> best_offsets;
  std::vector<int> order(blocks.size());
  auto try_order = [&](bool sweep) {
    for (bool best_fit : {false, true}) {
      const std::size_t size = sweep ? place_by_first(blocks, order, best_fit) : place_in_order(blocks, order, best_fit);
      if (size >= best) continue;
      best = size;
      best_offsets.clear();
      for (const Block& b : blocks) best_offsets.push_back(b.offset);
    }
  };
  for (std::size_t k = quadratic ? 0 : by_first; k < orders.size(); ++k) {
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return orders[k](blocks[a], blocks[b]); });
    try_order(k == by_first);
  }
  Rng rng(0x5eed);
  for (int r = 0; r < kRandomRestarts; ++r) {
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
    try_order(false);
  }
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i].offset = best_offsets[i];
  return blocks.empty() ? 0 : best;
}

}  // namespace

MemoryPlan plan_memory(const Graph& g, const std::vector<NodeId>& order, int batch, const std::vector<ValueId>& keep,
                       const std::vector<std::size_t>& workspace, const std::vector<ValueId>* host_pool) {
  CRUMB_CHECK(batch >= 1, "plan_memory: batch must be >= 1, got ", batch);
  CRUMB_CHECK(workspace.size() == order.size(), "plan_memory: ", workspace.size(), " workspace sizes for ",
              order.size(), " steps");
  const int nv = g.num_values(), ns = static_cast<int>(order.size());
  MemoryPlan p;
  p.order = order;
  p.offset.assign(nv, -1);
  p.first.assign(nv, -1);
  p.last.assign(nv, -1);
  p.block_of.assign(nv, -1);
  p.space.assign(nv, MemorySpace::Arena);
  std::vector<std::size_t> bytes(nv, 0);
  std::vector<bool> in_host(nv, false);
  if (host_pool)
    for (ValueId v : *host_pool) {
      CRUMB_CHECK(v >= 0 && v < nv && in_arena(g, v) && g.storage_root(v) == v, "plan_memory: value ", v,
                  " cannot go to the host pool (only activations that own their storage can)");
      in_host[v] = true;
    }

  // The last step with a kernel that reads each parameter (a view reads nothing itself): with the optimizer
  // stepping in the backward pass, a parameter's gradient is live until then, where its update runs.
  std::vector<int> param_read(g.step_in_backward() ? nv : 0, -1);
  for (int s = 0; s < ns; ++s) {
    const Node& n = g.node(order[s]);
    for (ValueId v : n.out) {
      if (!in_arena(g, v)) continue;
      // A parameter's gradient that several steps add into (a shared parameter's) begins at the first.
      if (p.first[v] < 0 || g.value(v).kind != ValueKind::ParamGrad) p.first[v] = s;
      p.last[v] = s;
      bytes[v] = align_up(static_cast<std::size_t>(g.value(v).count(batch)) * dtype_size(g.value(v).dtype));
    }
    for (ValueId v : n.in) {
      if (!param_read.empty() && !n.def->view && g.value(g.storage_root(v)).kind == ValueKind::Param)
        param_read[g.storage_root(v)] = s;
      if (!in_arena(g, v)) continue;
      CRUMB_CHECK(p.first[v] >= 0, "plan_memory: step ", s, " (layer '", n.name, "') reads '", g.value(v).name,
                  "' before it is computed");
      p.last[v] = s;
    }
    const std::size_t ws = align_up(workspace[s]);
    p.step_workspace.push_back(ws);
    p.workspace_bytes = std::max(p.workspace_bytes, ws);
  }
  for (ValueId v : keep)
    if (p.first[v] >= 0) p.last[v] = ns - 1;
  if (!param_read.empty())
    for (ValueId w : g.params()) {
      const ValueId dw = g.value(w).grad;
      if (dw >= 0 && p.first[dw] >= 0) p.last[dw] = std::max(p.last[dw], param_read[w]);
    }

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
    if (!n.def->inplace || n.def->inplace_output >= static_cast<int>(n.out.size())) continue;
    const ValueId out = n.out[n.def->inplace_output];
    if (!in_arena(g, n.in[0]) || !in_arena(g, out)) continue;
    if (in_host[grp.find(n.in[0])] != in_host[out]) continue;  // storage is never shared across spaces
    const int r = grp.find(n.in[0]);
    if (glast[r] == s && gbytes[r] >= bytes[out] && grp.find(out) != r) join(n.in[0], out);
  }

  // Blocks to place, per space: one per storage group, and in the arena one per step that needs workspace.
  std::vector<Block> blocks, host_blocks;
  for (ValueId v = 0; v < nv; ++v)
    if (p.first[v] >= 0 && grp.find(v) == v) (in_host[v] ? host_blocks : blocks).push_back({gbytes[v], gfirst[v], glast[v], v});
  for (int s = 0; s < ns; ++s)
    if (p.step_workspace[s]) blocks.push_back({p.step_workspace[s], s, s, -1 - s});
  p.arena_bytes = place_blocks(blocks);
  p.host_pool_bytes = place_blocks(host_blocks);
  std::vector<int64_t> goffset(nv, -1);
  p.workspace_offset.assign(ns, -1);
  std::vector<int64_t> live_change(ns + 1, 0);
  for (const Block& b : blocks) {
    if (b.root >= 0) {
      goffset[b.root] = static_cast<int64_t>(b.offset);
      live_change[b.first] += static_cast<int64_t>(b.bytes);
      live_change[b.last + 1] -= static_cast<int64_t>(b.bytes);
    } else {
      p.workspace_offset[b.first] = static_cast<int64_t>(b.offset);
    }
  }
  p.live_bytes.assign(ns, 0);
  int64_t live = 0;
  for (int s = 0; s < ns; ++s) p.live_bytes[s] = static_cast<std::size_t>(live += live_change[s]);
  for (const Block& b : host_blocks) goffset[b.root] = static_cast<int64_t>(b.offset);
  for (ValueId v = 0; v < nv; ++v)
    if (p.first[v] >= 0) {
      p.offset[v] = goffset[grp.find(v)];
      p.block_of[v] = grp.find(v);
      if (in_host[grp.find(v)]) p.space[v] = MemorySpace::HostPool;
    }
  for (int s = 0; s < ns; ++s) {
    p.peak_live = std::max(p.peak_live, p.live_bytes[s]);
    p.lower_bound = std::max(p.lower_bound, p.live_bytes[s] + p.step_workspace[s]);
  }
  return p;
}

}  // namespace crumb
