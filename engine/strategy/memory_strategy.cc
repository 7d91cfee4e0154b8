#include "engine/strategy/memory_strategy.h"

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <unordered_map>

#include "engine/base/error.h"
#include "engine/device/backend.h"
#include "engine/plan/compile.h"
#include "engine/graph/op.h"
#include "engine/strategy/defer_branches.h"
#include "engine/strategy/recompute.h"
#include "engine/strategy/segments.h"
#include "engine/graph/saved_values.h"
#include "engine/strategy/swap.h"
#include "engine/ops/norm.h"

namespace crumb {

Strategy parse_strategy(const std::string& name) {
  for (Strategy s : {Strategy::Auto, Strategy::MicroBatch, Strategy::Swap, Strategy::Recompute, Strategy::None})
    if (name == strategy_name(s)) return s;
  CRUMB_FAIL("unknown --strategy '", name, "' (use auto, micro-batch, swap, recompute or none)");
}

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::Auto: return "auto";
    case Strategy::MicroBatch: return "micro-batch";
    case Strategy::Swap: return "swap";
    case Strategy::Recompute: return "recompute";
    case Strategy::None: return "none";
  }
  return "auto";
}

namespace {

std::size_t bytes_at(const Graph& g, ValueId v, int m) {
  return align_up(static_cast<std::size_t>(g.value(v).count(m)) * dtype_size(g.value(v).dtype));
}

// A rewrite of the base graph tried at one micro-batch size, planned (not compiled: the base graph's
// kernels and workspace sizes stand for the rewritten one's: a recomputed node needs its original's).
struct Trial {
  Graph graph;
  std::vector<ValueId> swapped, recomputed;
  std::vector<Refresh> refresh;  // values recomputed a second time (nested segment groups)
  MemoryPlan plan;
  std::size_t total = 0;
  std::vector<std::string> lean;  // steps running their lean variant
};

class Search {
 public:
  // Plans only: nothing is measured or allocated, so a search costs memory in proportion to the graph,
  // not to its tensors.
  Search(const Graph& g, const StrategyRequest& r, int m)
      : g_(g), deferred_(deferred(g)), m_(m), estimated_(estimate_costs(g, m)), base_(plan_micro_batch(g, m, r.optimizer, r.device, r.index)) {
    count_loader(g, r.batch, base_);
    fixed_ = base_.memory.total() - base_.memory.arena;
    const std::vector<NodeId>& order = base_.train.plan.order;
    for (std::size_t s = 0; s < order.size(); ++s) workspace_[g.node(order[s]).name] = base_.train.steps[s].workspace;
    // Only CPU rows have lean variants so far; asking a CUDA row would run its algorithm search again.
    Backend& b = backend(r.device, r.index);
    for (std::size_t s = 0; s < order.size() && r.device == Device::CPU; ++s) {
      Node lean = g.node(order[s]);
      if (!lean.def->lean_variant) continue;
      lean.lean = true;
      const std::size_t bytes = compile_step(b, g, lean, m).workspace;
      if (bytes < base_.train.steps[s].workspace) lean_workspace_[lean.name] = bytes;
    }
    saved_ = saved_values(g_);
    is_saved_.assign(g_.num_values(), false);
    for (const SavedValue& s : saved_) is_saved_[s.value] = true;
    segs_ = segments(g_);
    seg_bytes_.saved.assign(segs_.size(), 0);
    seg_bytes_.output.assign(segs_.size(), 0);
    seg_bytes_.transient.assign(segs_.size(), 0);
    std::vector<int> segment_of(g_.num_nodes(), -1);
    for (std::size_t k = 0; k < segs_.size(); ++k) {
      std::size_t& largest = seg_bytes_.transient[k];
      for (NodeId i = segs_[k].first_node; i <= segs_[k].last_node; ++i) {
        segment_of[i] = static_cast<int>(k);
        for (ValueId v : g_.node(i).out) {
          if (is_saved_[v]) seg_bytes_.saved[k] += bytes_at(g_, v, m_);
          if (g_.value(v).kind == ValueKind::Activation) largest = std::max(largest, bytes_at(g_, v, m_));
        }
      }
      if (segs_[k].output >= 0) seg_bytes_.output[k] = bytes_at(g_, segs_[k].output, m_);
      bool recomputes = false;
      for (NodeId i = segs_[k].first_node; i <= segs_[k].last_node; ++i)
        for (ValueId v : g_.node(i).out) recomputes |= recomputable(g_, v);
      seg_can_drop_.push_back(recomputes);
    }
    // Beside its saved values a segment's backward holds a gradient in and one out, as large as its largest
    // value, and a step's workspace, counted with the latest segment whose values the step reads.
    std::vector<std::size_t> workspace(segs_.size(), 0);
    for (NodeId i = first_backward_node(g_); i < g_.num_nodes(); ++i) {
      int k = -1;
      for (ValueId v : g_.node(i).in)
        if (g_.value(v).producer >= 0) k = std::max(k, segment_of[g_.value(v).producer]);
      const auto w = workspace_.find(g_.node(i).name);
      if (k >= 0 && w != workspace_.end()) workspace[k] = std::max(workspace[k], w->second);
    }
    for (std::size_t k = 0; k < segs_.size(); ++k) seg_bytes_.transient[k] = 2 * seg_bytes_.transient[k] + workspace[k];
    segment_model(segment_of);
  }

  // What choose_segments weighs (SegmentModel), but the seconds, from the plan in memory. Segment k's
  // backward steps run from the first after the last that reads a value of a later segment (a downsampling
  // shortcut's gradient, which reads the block's input, belongs to the block) to the last that reads one
  // of k's; at each, what is live beyond the blocks the segments before k computed (which the backward pass
  // holds until their own steps) is k's own: its saved values, the gradients, the workspace. Its peak is
  // that at its most; light, without the blocks of its cheap values (cheap_to_recompute) but at the steps
  // that read them.
  void segment_model(const std::vector<int>& segment_of) {
    const std::size_t n = segs_.size();
    const Graph& g = deferred_;  // the plan's node ids are its own (its forward nodes are g_'s)
    SegmentModel& sm = seg_model_;
    sm.output = seg_bytes_.output;
    sm.saved = sm.saved_light = seg_bytes_.saved;
    sm.peak.assign(n, 0);
    sm.peak_light.assign(n, 0);
    sm.peak_recomputed.assign(n, 0);
    sm.peak_recomputed_light.assign(n, 0);
    sm.can_drop = seg_can_drop_;
    std::vector<bool> cheap(g.num_values(), false);  // a cheap inner value of its segment
    for (std::size_t k = 0; k < n; ++k)
      for (NodeId i = segs_[k].first_node; i <= segs_[k].last_node; ++i)
        for (ValueId v : g.node(i).out)
          if (v != segs_[k].output && cheap_to_recompute(g, v)) {
            cheap[v] = true;
            if (is_saved_[v]) sm.saved_light[k] -= bytes_at(g, v, m_);
          }
    const Trial whole = trial({}, {}, &estimated_, {}, {}, true);
    const MemoryPlan& plan = whole.plan;
    const int steps = static_cast<int>(plan.order.size());
    std::vector<int> step_of(g.num_nodes(), -1);
    for (int s = 0; s < steps; ++s) step_of[plan.order[s]] = s;
    // trigger[v]: for an inner value of a dropped segment, the step that computes it again: the first
    // backward step that reads it or a value computed from it inside the segment (forward nodes in reverse).
    constexpr int kNever = std::numeric_limits<int>::max();
    std::vector<int> trigger(g.num_values(), kNever);
    for (NodeId i = first_backward_node(g); i < g.num_nodes(); ++i)
      for (ValueId v : g.node(i).in) trigger[v] = std::min(trigger[v], step_of[i]);
    for (std::size_t k = 0; k < n; ++k)
      for (NodeId i = segs_[k].last_node; i >= segs_[k].first_node; --i) {
        int t = kNever;
        for (ValueId v : g.node(i).out) t = std::min(t, v == segs_[k].output ? kNever : trigger[v]);
        for (ValueId v : g.node(i).in)
          if (g.value(v).producer >= segs_[k].first_node && g.value(v).producer <= segs_[k].last_node)
            trigger[v] = std::min(trigger[v], t);
      }
    std::vector<bool> inner(g.num_values(), false);  // recomputed with its dropped segment
    for (std::size_t k = 0; k < n; ++k)
      for (NodeId i = segs_[k].first_node; i <= segs_[k].last_node; ++i)
        for (ValueId v : g.node(i).out) inner[v] = v != segs_[k].output && recomputable(g, v);
    std::vector<int> phase(steps, 0);
    for (int s = steps - 1, current = 0; s >= 0; --s) {
      const Node& node = g.node(plan.order[s]);
      if (!node.backward) continue;
      for (ValueId v : node.in) {
        const NodeId p = g.value(v).producer;
        if (p >= 0 && segment_of[p] >= 0) current = std::max(current, segment_of[p]);
      }
      phase[s] = current;
    }
    // A block lives from the first step of its values to the last (an in-place ReLU's output keeps its
    // BatchNorm's block); it is cheap when all its values are.
    std::vector<int> first(g.num_values(), -1), last(g.num_values(), -1);
    std::vector<bool> cheap_block(g.num_values(), true);
    std::vector<int> block_trigger(g.num_values(), kNever);  // kNever: not all of it is computed again
    std::vector<bool> inner_block(g.num_values(), true);
    for (ValueId v = 0; v < g.num_values(); ++v) {
      const ValueId b = plan.block_of[v];
      if (b < 0 || plan.first[v] < 0) continue;
      first[b] = first[b] < 0 ? plan.first[v] : std::min(first[b], plan.first[v]);
      last[b] = std::max(last[b], plan.last[v]);
      cheap_block[b] = cheap_block[b] && cheap[v];
      inner_block[b] = inner_block[b] && inner[v];
      block_trigger[b] = std::min(block_trigger[b], trigger[v]);
    }
    struct Live {
      int segment;
      ValueId block;
    };
    std::vector<std::vector<Live>> forward_blocks(steps);
    for (ValueId v = 0; v < g.num_values(); ++v) {
      const NodeId p = g.value(v).producer;
      if (first[v] < 0 || p < 0 || segment_of[p] < 0) continue;
      for (int st = first[v]; st <= last[v]; ++st) forward_blocks[st].push_back({segment_of[p], v});
    }
    for (int s = 0; s < steps; ++s) {
      const Node& node = g.node(plan.order[s]);
      if (!node.backward) continue;
      const int k = phase[s];
      // Of k's blocks: cheap ones not read here; ones not yet computed again; either.
      std::size_t before = 0, unread_cheap = 0, not_yet = 0, either = 0;
      for (const Live& l : forward_blocks[s]) {
        const std::size_t bytes = bytes_at(g, l.block, m_);
        if (l.segment < k) before += bytes;
        if (l.segment != k) continue;
        bool read = false;
        for (ValueId v : node.in) read |= plan.block_of[v] == l.block;
        const bool cheap_unread = cheap_block[l.block] && !read;
        const bool later = inner_block[l.block] && block_trigger[l.block] != kNever && block_trigger[l.block] > s;
        unread_cheap += cheap_unread ? bytes : 0;
        not_yet += later ? bytes : 0;
        either += cheap_unread || later ? bytes : 0;
      }
      const std::size_t here = plan.live_bytes[s] + plan.step_workspace[s];
      const std::size_t own = here > before ? here - before : 0;
      auto less = [&](std::size_t b) { return own > b ? own - b : 0; };
      sm.peak[k] = std::max(sm.peak[k], own);
      sm.peak_light[k] = std::max(sm.peak_light[k], less(unread_cheap));
      sm.peak_recomputed[k] = std::max(sm.peak_recomputed[k], less(not_yet));
      sm.peak_recomputed_light[k] = std::max(sm.peak_recomputed_light[k], less(either));
    }
    // A segment whose backward reads nothing of its own still holds its saved values.
    for (std::size_t k = 0; k < n; ++k) {
      sm.peak[k] = std::max(sm.peak[k], sm.saved[k]);
      sm.peak_light[k] = std::max(sm.peak_light[k], sm.saved_light[k]);
    }
  }

  int micro_batch() const { return m_; }
  const Graph& graph() const { return g_; }
  const MemoryBreakdown& in_memory() const { return base_.memory; }
  std::size_t in_memory_total() const { return base_.memory.total(); }

  // costs: the cost model that times swaps.
  // lean: steps that run their lean variant (Node::lean).
  // refresh: the values recomputed a second time (Refresh), of those in recomputed.
  // A plan that recomputes starts from deferred_, one that does not from g_ (unless `deferred`).
  Trial trial(const std::vector<ValueId>& recomputed, const std::vector<ValueId>& swapped,
              const CostModel* costs, const std::vector<std::string>& lean = {},
              const std::vector<Refresh>& refresh = {}, bool deferred = false) const {
    Trial t{recomputed.empty() && !deferred ? g_ : deferred_, {}, recomputed, refresh, {}, 0, lean};
    if (!recomputed.empty()) recompute(t.graph, recomputed, refresh);
    if (!swapped.empty()) {
      SwapTiming timing;
      for (NodeId i = 0; i < t.graph.num_nodes(); ++i) timing.node_seconds.push_back(costs->seconds(t.graph.node(i), m_));
      timing.seconds_per_byte = costs->seconds_per_byte;
      // Room to prefetch the next two values back while the current one is read.
      for (ValueId v : swapped) timing.window_bytes = std::max(timing.window_bytes, 2 * bytes_at(g_, v, m_));
      t.swapped = swap(t.graph, swapped, m_, timing).swapped;
    }
    std::vector<std::size_t> workspace;
    const std::string_view suffix = ops::kRecomputeSuffix;
    for (NodeId id : pass_order(t.graph, Pass::Train)) {
      Node& n = t.graph.node(id);
      n.lean = std::find(lean.begin(), lean.end(), n.name) != lean.end();
      const auto& sizes = n.lean ? lean_workspace_ : workspace_;
      auto it = sizes.find(n.name);
      // A recomputed node needs what its original does (a convolution's scratch); a copy or a wait none.
      if (it == sizes.end() && n.name.size() > suffix.size() &&
          n.name.compare(n.name.size() - suffix.size(), suffix.size(), suffix) == 0)
        it = sizes.find(n.name.substr(0, n.name.size() - suffix.size()));
      workspace.push_back(it == sizes.end() ? 0 : it->second);
    }
    t.plan = plan_pass(t.graph, Pass::Train, m_, workspace);
    t.total = total_of(t.plan);
    return t;
  }

  // Where t exceeds the budget, the step at the peak of live bytes and workspace takes its lean variant
  // where it has one, while that lowers the peak (live bytes do not depend on workspace: one packing at
  // the end). Returns whether t's total fell.
  bool lean_peaks(Trial& t, std::size_t budget) const {
    if (t.total <= budget || lean_workspace_.empty()) return false;
    const std::vector<NodeId> order = pass_order(t.graph, Pass::Train);
    std::vector<std::size_t> workspace = t.plan.step_workspace;
    std::vector<NodeId> lean;
    while (true) {
      std::size_t peak = 0;
      for (std::size_t s = 0; s < workspace.size(); ++s)
        if (t.plan.live_bytes[s] + workspace[s] > t.plan.live_bytes[peak] + workspace[peak]) peak = s;
      const auto it = lean_workspace_.find(t.graph.node(order[peak]).name);
      if (it == lean_workspace_.end() || it->second >= workspace[peak]) break;
      workspace[peak] = it->second;
      lean.push_back(order[peak]);
    }
    if (lean.empty()) return false;
    MemoryPlan plan = plan_pass(t.graph, Pass::Train, m_, workspace);
    if (total_of(plan) >= t.total) return false;
    for (NodeId id : lean) {
      t.graph.node(id).lean = true;
      t.lean.push_back(t.graph.node(id).name);
    }
    t.plan = std::move(plan);
    t.total = total_of(t.plan);
    return true;
  }

  std::size_t total_of(const MemoryPlan& plan) const {
    return fixed_ + std::max(plan.arena_bytes, base_.eval.plan.arena_bytes);
  }

  // Adds values to swap or recompute, those live at the plan's peak first, until the plan fits `budget`
  // or nothing live at the peak can go. A step that does not lower the total is undone and its first
  // value set aside (recomputed values still take memory in the backward pass, so a value does not
  // always save what it weighs). Returns the trial that fits, else the smallest one seen. Values go in order
  // of bytes saved per predicted second: by `measured` costs, or (null) by the estimate that is the same
  // every run.
  // Starts from recomputing `initial` (a segment plan), which it only adds to.
  Trial greedy(bool allow_swap, bool allow_recompute, std::size_t budget, const CostModel* measured,
               const SegmentRecompute& initial = {}) const {
    const CostModel* costs = measured ? measured : &estimated_;
    std::vector<ValueId> recomputed = initial.values, swapped;
    std::vector<bool> taken(g_.num_values(), false);
    for (ValueId v : initial.values) taken[v] = true;
    Trial best = trial(recomputed, swapped, costs, {}, initial.refresh);
    bool one_at_a_time = false;
    while (best.total > budget) {
      const std::vector<Option> options = live_at_peak(best, taken, allow_swap, allow_recompute, costs);
      if (options.empty()) {
        if (lean_peaks(best, budget)) continue;  // new peaks, maybe with values to take
        break;
      }
      // Enough of the best options to cover half the excess in one step (a trial per value would be slow
      // on deep graphs), or one after a step that did not pay.
      const double goal = double(best.total - budget) / 2;
      std::vector<ValueId> try_recomputed = recomputed, try_swapped = swapped;
      double covered = 0;
      for (const Option& o : options) {
        if (covered > 0 && (one_at_a_time || covered >= goal)) break;
        covered += double(bytes_at(g_, o.value, m_));
        if (o.swap) try_swapped.push_back(o.value);
        else try_recomputed.insert(try_recomputed.end(), o.closure.begin(), o.closure.end());
      }
      std::sort(try_recomputed.begin(), try_recomputed.end());
      try_recomputed.erase(std::unique(try_recomputed.begin(), try_recomputed.end()), try_recomputed.end());
      Trial t = trial(try_recomputed, try_swapped, costs, best.lean, initial.refresh);
      if (t.total < best.total) {
        for (const Option& o : options) {
          if (std::find(try_swapped.begin(), try_swapped.end(), o.value) == try_swapped.end() &&
              !std::binary_search(try_recomputed.begin(), try_recomputed.end(), o.value))
            continue;
          taken[o.value] = true;
          for (ValueId u : o.closure) taken[u] = true;
        }
        recomputed = std::move(try_recomputed);
        swapped = std::move(try_swapped);
        best = std::move(t);
        one_at_a_time = false;
      } else {
        taken[options.front().value] = true;  // set aside: it did not pay at this point
        one_at_a_time = true;
      }
    }
    return best;
  }

  // The least total the greedy reaches with these techniques, ordered by the estimated costs (the same
  // every run). Computed once per search.
  // With recomputation, segment plans are tried too (engine/strategy/segments.h): every segment dropped,
  // alone or with the greedy swapping on top, where that reaches less.
  const Trial& least(bool allow_swap, bool allow_recompute) const {
    std::optional<Trial>& cached = least_[allow_swap * 2 + allow_recompute];
    if (cached) return *cached;
    cached = greedy(allow_swap, allow_recompute, 0, nullptr);
    for (bool two_levels : {false, true}) {
      if (!allow_recompute) break;
      const Trial& from = segment_least(two_levels);
      Trial seg = greedy(allow_swap, true, 0, nullptr, {from.recomputed, from.refresh});
      if (seg.total < cached->total) cached = std::move(seg);
    }
    return *cached;
  }

  // The values a segment plan recomputes: the `dropped` segments that save the most bytes per second of
  // recomputation (by costs), grouped so that the backward pass holds at most `limit` bytes of saved values
  // (group_segments); empty when they cannot be.
  SegmentRecompute segment_values(std::size_t dropped, std::size_t limit, const CostModel* costs) const {
    std::vector<std::pair<double, std::size_t>> order;  // (bytes per second, segment)
    for (std::size_t k = 0; k < segs_.size(); ++k) {
      if (seg_bytes_.saved[k] == 0) continue;
      double seconds = 0;
      for (NodeId i = segs_[k].first_node; i <= segs_[k].last_node; ++i) seconds += cost(i, costs);
      order.emplace_back(double(seg_bytes_.saved[k]) / (seconds + kTiny), k);
    }
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<bool> drop(segs_.size(), false);
    for (std::size_t i = 0; i < std::min(dropped, order.size()); ++i) drop[order[i].second] = true;
    // A segment that saves nothing (a pooling that keeps only its argmax) goes with the group before it.
    for (std::size_t k = 1; k < segs_.size(); ++k)
      if (seg_bytes_.saved[k] == 0 && drop[k - 1]) drop[k] = true;
    const std::vector<bool> starts = group_segments(drop, seg_bytes_, limit);
    if (starts.empty()) return {};
    return segment_plan(deferred_, segs_, {drop, starts, {}, {}});
  }

  // The segment plan with the least recomputation time (by costs) whose model of the backward peak stays
  // within `limit`, nested groups included (choose_segments); empty when none does, and on graphs of more
  // than kTwoLevelSegments segments, where its Pareto fronts grow with the segments and its work with
  // their square times the fronts' (a residual chain of 1,000 blocks planned for more than ten minutes):
  // those plan with plain groups only.
  SegmentRecompute nested_values(std::size_t limit, const CostModel* costs) const {
    if (segs_.size() > kTwoLevelSegments) return {};
    SegmentModel model = seg_model_;
    model.seconds.assign(segs_.size(), 0.0);
    model.light_seconds.assign(segs_.size(), 0.0);
    for (std::size_t k = 0; k < segs_.size(); ++k)
      for (NodeId i = segs_[k].first_node; i <= segs_[k].last_node; ++i) {
        model.seconds[k] += cost(i, costs);
        bool cheap = false;
        for (ValueId v : g_.node(i).out) cheap |= v != segs_[k].output && cheap_to_recompute(g_, v);
        if (cheap) model.light_seconds[k] += cost(i, costs);
      }
    const std::optional<SegmentChoice> c = choose_segments(model, limit);
    if (!c) return {};
    return segment_plan(deferred_, segs_, *c);
  }

  std::size_t droppable_segments() const {
    return static_cast<std::size_t>(std::count_if(seg_bytes_.saved.begin(), seg_bytes_.saved.end(), [](std::size_t b) { return b > 0; }));
  }

  // The limits on the bytes the backward pass holds tried for a segment plan: from all saved bytes down by
  // factors of 2^(1/8) to the largest segment's.
  std::vector<std::size_t> limits() const {
    std::size_t total = 0, largest = 0;
    for (std::size_t b : seg_bytes_.saved) total += b, largest = std::max(largest, b);
    std::vector<std::size_t> out;
    for (double b = double(total); b >= double(largest) && out.size() < 40; b /= 1.0905077326652577)
      out.push_back(static_cast<std::size_t>(b));
    return out;
  }

  // Every segment dropped, in the groups that give the least total: the same every run (no timing decides
  // it). Computed once per search.
  // two_levels: the plans choose_segments makes (nested and light groups), else every segment dropped in
  // plain groups (segment_values). The greedy search goes on from each (least), as the one that holds less
  // does not always leave it the most to take.
  const Trial& segment_least(bool two_levels) const {
    std::optional<Trial>& least = segment_least_[two_levels];
    if (least) return *least;
    least = trial({}, {}, &estimated_);
    for (std::size_t limit : limits()) {
      const SegmentRecompute plan =
          two_levels ? nested_values(limit, &estimated_) : segment_values(droppable_segments(), limit, &estimated_);
      if (plan.values.empty()) break;  // the model of the peak says that a lower limit cannot be met either
      Trial t = trial(plan.values, {}, &estimated_, {}, plan.refresh);
      if (t.total < least->total) least = std::move(t);
    }
    lean_peaks(*least, 0);
    // Fewer segments dropped can hold less (recomputed copies live in the backward pass too): the fastest
    // plan under a budget just below the least so far, by the same estimate, while that finds one.
    for (int round = 0; round < 3 && least->total > fixed_ + 1; ++round) {
      std::optional<Trial> lower = segment_fit(least->total - 1, estimated_, two_levels);
      if (!lower || lower->total >= least->total) break;
      least = std::move(*lower);
    }
    return *least;
  }

  std::size_t segment_least_total() const { return std::min(segment_least(false).total, segment_least(true).total); }

  // The segment plan with the least predicted step under the budget: for limits on the backward pass's saved
  // bytes at and below what the budget leaves the arena, the fewest segments dropped that fit (a binary
  // search: dropping more holds less), then the fastest of those by `costs`.
  // two_levels: nested and light groups too (choose_segments).
  std::optional<Trial> segment_fit(std::size_t budget, const CostModel& costs, bool two_levels = true) const {
    std::optional<Trial> best;
    double best_seconds = 0;
    if (budget <= fixed_) return best;
    for (double share : {1.15, 1.0, 0.85, 0.7, 0.55}) {  // the model of the peak is rough
      const std::size_t limit = static_cast<std::size_t>(share * double(budget - fixed_));
      std::size_t lo = 1, hi = droppable_segments();
      std::optional<Trial> fit;
      while (lo <= hi) {
        const std::size_t mid = lo + (hi - lo) / 2;
        const SegmentRecompute plan = segment_values(mid, limit, &costs);
        std::optional<Trial> t;
        if (!plan.values.empty()) {
          t = trial(plan.values, {}, &costs);
          lean_peaks(*t, budget);
        }
        if (t && t->total <= budget) {
          fit = std::move(t);
          hi = mid - 1;
        } else {
          lo = mid + 1;
        }
      }
      std::optional<Trial> nested_fit;
      if (const SegmentRecompute nested = two_levels ? nested_values(limit, &costs) : SegmentRecompute{};
          !nested.values.empty()) {
        nested_fit = trial(nested.values, {}, &costs, {}, nested.refresh);
        lean_peaks(*nested_fit, budget);
      }
      // The fewest segments dropped in plain groups, and the least recomputation time within the limit with
      // nested groups (choose_segments).
      for (std::optional<Trial>* t : {&fit, &nested_fit}) {
        if (!*t || (*t)->total > budget) continue;
        const double seconds = costs.simulate((*t)->graph, m_);
        if (!best || seconds < best_seconds) best = std::move(*t), best_seconds = seconds;
      }
    }
    return best;
  }

 private:
  struct Option {
    double score;  // bytes saved per predicted second added
    ValueId value;
    bool swap;
    std::vector<ValueId> closure;  // recomputed along with value
  };

  // The saved values not yet taken whose storage is live at the plan's peak, each with its cheaper way out
  // of the arena, best first.
  std::vector<Option> live_at_peak(const Trial& t, const std::vector<bool>& taken, bool allow_swap,
                                   bool allow_recompute, const CostModel* costs) const {
    std::size_t peak = 0;
    for (std::size_t s = 0; s < t.plan.live_bytes.size(); ++s)
      if (t.plan.live_bytes[s] + t.plan.step_workspace[s] > t.plan.live_bytes[peak] + t.plan.step_workspace[peak])
        peak = s;
    // A value is live at the peak when its storage block is: its own lifetime, or that of the values it
    // shares storage with (an in-place ReLU's output keeps its input's block).
    std::unordered_map<ValueId, std::pair<int, int>> block_life;
    for (ValueId v = 0; v < t.graph.num_values(); ++v) {
      const ValueId b = t.plan.block_of[v];
      if (b < 0) continue;
      auto [it, fresh] = block_life.try_emplace(b, t.plan.first[v], t.plan.last[v]);
      if (!fresh) it->second = {std::min(it->second.first, t.plan.first[v]), std::max(it->second.second, t.plan.last[v])};
    }
    std::vector<Option> options;
    for (const SavedValue& s : saved_) {
      const ValueId v = s.value;
      if (taken[v] || t.plan.block_of[v] < 0) continue;
      const auto [first, last] = block_life.at(t.plan.block_of[v]);
      if (first > static_cast<int>(peak) || last < static_cast<int>(peak)) continue;
      const double bytes = double(bytes_at(g_, v, m_));
      std::optional<Option> best;
      if (allow_recompute) {
        std::vector<ValueId> closure = recompute_closure(g_, v, is_saved_);
        if (!closure.empty()) {
          double extra = 0;
          for (ValueId u : closure) extra += cost(g_.value(u).producer, costs);
          best = Option{bytes / (extra + kTiny), v, false, std::move(closure)};
        }
      }
      if (allow_swap) {
        double gap = 0;
        for (int i = s.last_forward + 1; i < s.first_backward; ++i) gap += cost(i, costs);
        const double copies = 2 * bytes * costs->seconds_per_byte;
        const double hidden = costs->copies_overlap ? gap : 0.0;
        const double score = bytes / (std::max(0.0, copies - hidden) + kTiny);
        if (!best || score > best->score) best = Option{score, v, true, {}};
      }
      if (best) options.push_back(std::move(*best));
    }
    // Stable: among equals (on the CPU every swap costs the same per byte) the earliest computed goes first.
    std::stable_sort(options.begin(), options.end(), [](const Option& a, const Option& b) { return a.score > b.score; });
    return options;
  }

  static constexpr double kTiny = 1e-9;
  // The most segments nested_values plans two-level groups for (ResNet-50 has 39 unfused, 23 fused).
  static constexpr std::size_t kTwoLevelSegments = 64;
  // Seconds of base-graph node i at m.
  double cost(NodeId i, const CostModel* costs) const { return costs->seconds(g_.node(i), m_); }

  static Graph deferred(Graph g) {
    defer_gradient_branches(g);
    return g;
  }

  const Graph& g_;
  // Recomputation starts from g with its gradient branches reordered (defer_gradient_branches): recomputed
  // shortcut branches then run where they hold least. The same values and forward nodes as g_.
  Graph deferred_;
  int m_;
  CostModel estimated_;  // estimate_costs: what decides whether a budget fits
  mutable std::optional<Trial> least_[4];  // least(), by technique
  mutable std::optional<Trial> segment_least_[2];  // segment_least(two_levels)
  MicroBatchPlan base_;
  std::size_t fixed_ = 0;  // everything but the arena
  std::unordered_map<std::string, std::size_t> workspace_;
  std::unordered_map<std::string, std::size_t> lean_workspace_;  // the steps with a leaner variant: its workspace
  std::vector<SavedValue> saved_;
  std::vector<bool> is_saved_;
  std::vector<Segment> segs_;
  SegmentBytes seg_bytes_;  // at m_
  SegmentModel seg_model_;  // what choose_segments weighs, but the seconds (segment_model)
  std::vector<bool> seg_can_drop_;  // segment k has values to recompute
};

// Of `values` (of g), those whose producer a rewrite of g computes again more than once (its clones are named
// after it, engine/graph/op.h).
std::vector<ValueId> computed_twice(const Graph& g, const Graph& rewritten, const std::vector<ValueId>& values) {
  std::unordered_map<std::string, int> clones;
  for (NodeId i = 0; i < rewritten.num_nodes(); ++i) clones[rewritten.node(i).name] += 1;
  std::vector<ValueId> out;
  for (ValueId v : values) {
    const auto it = clones.find(g.node(g.value(v).producer).name + std::string(ops::kRecomputeSuffix));
    if (it != clones.end() && it->second > 1) out.push_back(v);
  }
  return out;
}

// The techniques a strategy may use, and in what combinations: auto tries both together, then each alone.
struct Technique {
  bool swap, recompute;
};
std::vector<Technique> techniques(Strategy s) {
  if (s == Strategy::Swap) return {{true, false}};
  if (s == Strategy::Recompute) return {{false, true}};
  return {{true, true}, {true, false}, {false, true}};
}

// The least total a technique reaches at this micro-batch (Search::least): it does not depend on measured
// times, so it is the same every run.
const Trial& least(const Search& s, const Technique& t) { return s.least(t.swap, t.recompute); }

// The least total any technique of the strategy reaches at this search's micro-batch (Search::least): what
// a failure reports, and what least_budget returns.
std::size_t least_total(const Search& s, Strategy strategy) {
  std::size_t out = std::numeric_limits<std::size_t>::max();
  for (const Technique& t : techniques(strategy)) out = std::min(out, least(s, t).total);
  return out;
}

// Whether some technique of the strategy fits the budget at this search's micro-batch: decided by the
// search that does not depend on measured times (a budget fits exactly when it is at least least_total,
// which is what a failure reports), from sizes alone, before anything is measured.
bool fits(const Search& s, Strategy strategy, std::size_t budget) { return least_total(s, strategy) <= budget; }

// The micro-batch a strategy is judged at when micro-batching alone does not fit: the forced one, else
// the smallest allowed (one BatchNorm group; the batch where BatchNorm normalises over it).
int smallest_micro_batch(const Graph& g, const StrategyRequest& r) {
  if (r.micro_batch > 0) return std::min(r.micro_batch, r.batch);
  const int multiple = micro_batch_multiple(g);
  return std::min(multiple == 0 ? r.batch : multiple, r.batch);
}

// The trial that fits the budget at this search's micro-batch with the least predicted step time, if any.
// Measured costs only choose among the trials that fit.
std::optional<Trial> best_fit(const Search& s, Strategy strategy, std::size_t budget, const CostModel& costs) {
  std::optional<Trial> best;
  double best_seconds = 0;
  for (const Technique& t : techniques(strategy)) {
    if (least(s, t).total > budget) continue;
    // The cost-ordered greedy's path depends on the budget (each step covers half the excess); where it
    // stops short, its path to the least it reaches may fit, else the deterministic one does.
    Trial trial = s.greedy(t.swap, t.recompute, budget, &costs);
    if (trial.total > budget) trial = s.greedy(t.swap, t.recompute, 0, &costs);
    if (trial.total > budget) trial = least(s, t);
    std::vector<Trial> candidates;
    candidates.push_back(std::move(trial));
    if (t.recompute && s.segment_least_total() <= budget) {
      if (std::optional<Trial> seg = s.segment_fit(budget, costs)) candidates.push_back(std::move(*seg));
    }
    for (bool two_levels : {false, true}) {
      if (!t.recompute || !t.swap) break;
      const Trial& from = s.segment_least(two_levels);
      Trial seg = s.greedy(true, false, budget, &costs, {from.recomputed, from.refresh});
      if (seg.total <= budget) candidates.push_back(std::move(seg));
    }
    for (Trial& c : candidates) {
      const double seconds = costs.simulate(c.graph, s.micro_batch());
      if (!best || seconds < best_seconds) best = std::move(c), best_seconds = seconds;
    }
  }
  return best;
}

// Measures the costs for a search that fits the budget (fits), within the budget: the kernels run the
// graph in memory at the timing batch where that fits, else the least-memory rewrite that fits at the
// search's micro-batch, and so at the timing batch (memory grows with the micro-batch), with the smallest
// host pool (on the CPU the host pool is process memory too); the copies take a constant 32 MiB after
// that (measure_costs).
CostModel measure_within(const Graph& g, const Search& s, const StrategyRequest& r) {
  const int timing = timing_batch(g, s.micro_batch(), r.device, r.index);
  MicroBatchPlan in_memory = plan_micro_batch(g, timing, r.optimizer, r.device, r.index);
  count_loader(g, r.batch, in_memory);
  if (in_memory.memory.total() <= r.budget) return measure_costs(g, timing, r.device, r.index);
  const Trial* smallest = nullptr;
  auto held = [](const Trial& t) { return t.total + t.plan.host_pool_bytes; };
  for (const Technique& t : techniques(r.strategy)) {
    const Trial& least_t = least(s, t);
    if (least_t.total <= r.budget && (!smallest || held(least_t) < held(*smallest))) smallest = &least_t;
  }
  return measure_costs(smallest->graph, timing, r.device, r.index);
}

// Takes `chosen` (a trial of s) as the plan: rewrites g for it, names what it swaps, recomputes (twice) and
// runs lean in out.choice, and compiles it into out.plan.
void adopt(Graph& g, const Search& s, Trial chosen, const StrategyRequest& r, StrategyPlan& out) {
  out.choice.in_memory_total = s.in_memory_total();
  out.choice.swapped = chosen.swapped;
  // The values that leave the arena: a segment plan also names the unsaved values between them.
  std::vector<bool> saved(g.num_values(), false);
  for (const SavedValue& v : saved_values(g)) saved[v.value] = true;
  for (ValueId v : chosen.recomputed)
    if (saved[v]) out.choice.recomputed.push_back(v);
  out.choice.twice = computed_twice(g, chosen.graph, out.choice.recomputed);
  for (NodeId i = 0; i < chosen.graph.num_nodes(); ++i)
    if (chosen.graph.node(i).lean) out.choice.lean.push_back(chosen.graph.node(i).name);
  out.choice.used = chosen.swapped.empty() ? (chosen.recomputed.empty() ? "in memory" : "recompute")
                                           : (chosen.recomputed.empty() ? "swap" : "swap+recompute");
  g = std::move(chosen.graph);
  const int m = s.micro_batch();
  out.plan = plan_micro_batch(g, m, r.optimizer, r.device, r.index);
  count_loader(g, r.batch, out.plan);
}

// what_m: the micro-batch and why it is that size ("--micro-batch 32", "micro-batch 32 (one BatchNorm group)").
[[noreturn]] void fail_budget(const Search& s, Strategy strategy, const std::string& what_m, std::size_t budget) {
  // auto's least is the best of the three ways it tries (both together can end above swapping alone).
  const std::size_t both = least(s, {true, true}).total, swap = least(s, {true, false}).total,
                    recompute = least(s, {false, true}).total;
  const std::size_t auto_least = std::min({both, swap, recompute});
  const std::string least = detail::concat(", swap ", format_bytes(swap), ", recompute ", format_bytes(recompute),
                                           ", auto ", format_bytes(auto_least));
  const std::size_t fits = least_total(s, strategy);
  CRUMB_FAIL("memory budget ", format_bytes(budget), " cannot hold ", what_m, " with ",
             strategy == Strategy::Auto ? "any strategy" : "--strategy " + std::string(strategy_name(strategy)),
             "; the least each needs: in memory ", format_bytes(s.in_memory_total()), least, " (--memory-budget ",
             fits, " is the least that fits", persistent_note(s.graph(), s.in_memory(), budget),
             "; raise --memory-budget, or lower --micro-batch / --bn-group)");
}

}  // namespace

StrategyPlan plan_strategy(Graph& g, const StrategyRequest& r) {
  CRUMB_CHECK(r.batch >= 1, "batch must be >= 1, got ", r.batch);
  StrategyPlan out;
  out.choice.requested = r.strategy;
  const bool forced = r.micro_batch > 0;
  if (forced) check_micro_batch(g, r.micro_batch, r.batch);
  CRUMB_CHECK(r.strategy != Strategy::None || !forced || r.micro_batch >= r.batch, "--strategy none runs the batch of ",
              r.batch, " as one micro-batch in memory, but --micro-batch is ", r.micro_batch,
              ": drop one of them (--strategy micro-batch or auto splits the batch)");
  auto in_memory = [&](int m) {
    out.plan = plan_micro_batch(g, m, r.optimizer, r.device, r.index);
    count_loader(g, r.batch, out.plan);
    out.choice.used = "in memory";
    out.choice.in_memory_total = out.plan.memory.total();
    return out.plan.memory.total() <= r.budget;
  };
  if (r.strategy == Strategy::None || (r.strategy == Strategy::MicroBatch && forced)) {
    const int m = std::min(forced ? r.micro_batch : r.batch, r.batch);
    CRUMB_CHECK(in_memory(m), forced ? "--micro-batch " : "the whole batch of ", m, " needs ",
                format_bytes(out.plan.memory.total()), " which exceeds --memory-budget ", format_bytes(r.budget),
                forced ? " (raise --memory-budget, drop --micro-batch to pick the largest that fits, or use --strategy "
                         "auto to swap and recompute)"
                       : " (--strategy none runs the batch as one micro-batch in memory: use --strategy auto)");
    return out;
  }
  // Micro-batching alone, where it can do it.
  if (!forced && (r.strategy == Strategy::MicroBatch || r.strategy == Strategy::Auto)) {
    try {
      out.plan = choose_micro_batch(g, r.batch, r.budget, r.optimizer, r.device, r.index);
      out.choice.used = "micro-batch";
      out.choice.in_memory_total = out.plan.memory.total();
      return out;
    } catch (const Error&) {
      if (r.strategy == Strategy::MicroBatch) throw;
    }
  }
  if (forced && r.strategy == Strategy::Auto && in_memory(std::min(r.micro_batch, r.batch))) return out;

  const int multiple = micro_batch_multiple(g);
  const int q = multiple == 0 ? r.batch : multiple;
  auto m_of = [&](int k) { return static_cast<int>(std::min<int64_t>(int64_t{k} * q, r.batch)); };
  int m = smallest_micro_batch(g, r);
  auto search = std::make_unique<Search>(g, r, m);
  if (!fits(*search, r.strategy, r.budget))
    fail_budget(*search, r.strategy,
                forced          ? "--micro-batch " + std::to_string(m)
                : multiple == 0 ? "the whole batch of " + std::to_string(m) +
                                      " as one micro-batch (BatchNorm over the batch: --bn-group batch; a smaller "
                                      "--bn-group or --norm gn lifts this)"
                : q > 1         ? "micro-batch " + std::to_string(m) + " (one BatchNorm group, --bn-group)"
                                : "micro-batch 1",
                r.budget);
  CostModel costs = measure_within(g, *search, r);
  std::optional<Trial> chosen = best_fit(*search, r.strategy, r.budget, costs);
  // --strategy swap or recompute with m free: the largest m they fit (memory grows with m).
  if (!forced && r.strategy != Strategy::Auto) {
    int lo = 1, hi = (r.batch + q - 1) / q;
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      auto candidate = std::make_unique<Search>(g, r, m_of(mid));
      std::optional<Trial> t = best_fit(*candidate, r.strategy, r.budget, costs);
      if (t) {
        lo = mid;
        chosen = std::move(t);
        search = std::move(candidate);
        m = m_of(mid);
      } else {
        hi = mid - 1;
      }
    }
  }
  out.choice.in_memory_seconds = costs.simulate(g, m);
  adopt(g, *search, std::move(*chosen), r, out);
  out.choice.predicted_seconds = costs.simulate(g, m);
  out.choice.costs = std::move(costs);
  return out;
}

StrategyPlan least_plan(Graph& g, const StrategyRequest& r) {
  CRUMB_CHECK(r.strategy == Strategy::Swap || r.strategy == Strategy::Recompute || r.strategy == Strategy::Auto,
              "least_plan: --strategy ", strategy_name(r.strategy), " neither swaps nor recomputes");
  const Search s(g, r, smallest_micro_batch(g, r));
  const Trial* best = nullptr;
  for (const Technique& t : techniques(r.strategy))
    if (!best || least(s, t).total < best->total) best = &least(s, t);
  StrategyPlan out;
  out.choice.requested = r.strategy;
  adopt(g, s, Trial(*best), r, out);
  return out;
}

std::size_t least_budget(const Graph& g, const StrategyRequest& r) {
  const Search s(g, r, smallest_micro_batch(g, r));
  if (r.strategy == Strategy::None || r.strategy == Strategy::MicroBatch) return s.in_memory_total();
  const std::size_t least = least_total(s, r.strategy);
  return r.strategy == Strategy::Auto ? std::min(least, s.in_memory_total()) : least;
}

int frontier_timing_batch(const Graph& g, const StrategyRequest& r) {
  CRUMB_CHECK(r.micro_batch >= 1, "memory_frontier: a micro-batch size is needed, got ", r.micro_batch);
  return timing_batch(g, std::min(r.micro_batch, r.batch), r.device, r.index);
}

Frontier memory_frontier(const Graph& g, const StrategyRequest& r, int points) {
  return memory_frontier(g, r, measure_costs(g, frontier_timing_batch(g, r), r.device, r.index), points);
}

Frontier memory_frontier(const Graph& g, const StrategyRequest& r, CostModel costs, int points) {
  CRUMB_CHECK(r.micro_batch >= 1, "memory_frontier: a micro-batch size is needed, got ", r.micro_batch);
  CRUMB_CHECK(points >= 2, "memory_frontier: at least 2 budgets, got ", points);
  const int m = std::min(r.micro_batch, r.batch);
  const Strategy strategy = r.strategy == Strategy::Swap || r.strategy == Strategy::Recompute ? r.strategy : Strategy::Auto;
  const Search s(g, r, m);
  Frontier f;
  f.strategy = strategy;
  f.micro_batch = m;
  f.costs = std::move(costs);
  std::size_t lo = s.in_memory_total();
  for (const Technique& t : techniques(strategy)) lo = std::min(lo, least(s, t).total);
  const std::size_t hi = s.in_memory_total();
  std::vector<bool> saved(g.num_values(), false);
  const std::vector<SavedValue> all_saved = saved_values(g);
  for (const SavedValue& v : all_saved) saved[v.value] = true;
  std::vector<FrontierPoint> found;
  auto add = [&](const Trial& t) {
    FrontierPoint p;
    p.total = t.total;
    p.predicted_seconds = f.costs.simulate(t.graph, m);
    std::vector<bool> left(g.num_values(), false);
    for (ValueId v : t.swapped) left[v] = true, p.swapped += 1, p.swapped_bytes += bytes_at(g, v, m);
    std::vector<ValueId> recomputed;
    for (ValueId v : t.recomputed)
      if (saved[v] && !left[v]) left[v] = true, recomputed.push_back(v), p.recomputed_bytes += bytes_at(g, v, m);
    p.recomputed = static_cast<int>(recomputed.size());
    p.twice = static_cast<int>(computed_twice(g, t.graph, recomputed).size());
    for (const SavedValue& v : all_saved)
      if (!left[v.value]) p.kept += 1, p.kept_bytes += bytes_at(g, v.value, m);
    for (NodeId i = 0; i < t.graph.num_nodes(); ++i) p.lean += t.graph.node(i).lean;
    p.used = p.swapped ? (p.recomputed ? "swap+recompute" : "swap") : p.recomputed ? "recompute" : "in memory";
    found.push_back(p);
  };
  add(s.trial({}, {}, &f.costs));
  // The least itself, so that the frontier starts where the strategy's error line says (its planned memory
  // is the same every run; the plans between follow the measured times).
  for (const Technique& t : techniques(strategy))
    if (least(s, t).total == lo) {
      add(least(s, t));
      break;
    }
  for (int i = 0; i + 1 < points; ++i) {
    const std::size_t budget = lo + static_cast<std::size_t>(double(hi - lo) * i / (points - 1));
    if (std::optional<Trial> t = best_fit(s, strategy, budget, f.costs)) add(*t);
  }
  std::sort(found.begin(), found.end(), [](const FrontierPoint& a, const FrontierPoint& b) {
    return a.total != b.total ? a.total < b.total : a.predicted_seconds < b.predicted_seconds;
  });
  // A plan the measured times found below the least the strategy reports (which decides from sizes and
  // the estimate alone whether a budget fits) is left out: plan_strategy would refuse its budget.
  for (const FrontierPoint& p : found)
    if (p.total >= lo && (f.points.empty() || p.predicted_seconds < f.points.back().predicted_seconds))
      f.points.push_back(p);
  return f;
}

int budget_point(const Frontier& f, std::size_t budget) {
  int at = -1;
  for (std::size_t i = 0; budget && i < f.points.size(); ++i)
    if (f.points[i].total <= budget) at = static_cast<int>(i);
  return at;
}

void write_frontier(std::ostream& os, const Frontier& f, std::size_t budget) {
  if (f.points.empty()) return;
  const int marked = budget_point(f, budget);
  const FrontierPoint& full = f.points.back();
  os << "memory-time frontier at micro-batch " << f.micro_batch << " (--strategy " << strategy_name(f.strategy)
     << "; steps predicted from kernel times measured at " << f.costs.measured_batch << " samples):\n"
     << "  " << std::right << std::setw(12) << "memory" << std::setw(8) << "x" << std::setw(14) << "step"
     << std::setw(9) << "x" << "  " << std::left << std::setw(16) << "plan"
     << "saved values kept / recomputed (those twice) / swapped; steps lean[; graph]\n";
  for (const FrontierPoint& p : f.points) {
    os << "  " << std::right << std::setw(12) << format_bytes(p.total) << std::fixed << std::setprecision(3)
       << std::setw(8) << double(p.total) / double(full.total) << std::setprecision(2) << std::setw(11)
       << p.predicted_seconds * 1e3 << " ms" << std::setprecision(3) << std::setw(9)
       << (full.predicted_seconds > 0 ? p.predicted_seconds / full.predicted_seconds : 0.0) << "  " << std::left
       << std::setw(16) << p.used << p.kept << " (" << format_bytes(p.kept_bytes) << ") / " << p.recomputed << " ("
       << format_bytes(p.recomputed_bytes) << (p.twice ? ", " + std::to_string(p.twice) + " twice" : "") << ") / " << p.swapped << " (" << format_bytes(p.swapped_bytes) << "); "
       << p.lean << (p.graph.empty() ? "" : "; " + p.graph)
       << (&p - f.points.data() == marked ? "  <- the budget's" : "")
       << "\n";
    os.unsetf(std::ios::floatfield);
  }
}

void write_strategy_report(std::ostream& os, const Graph& g, const StrategyPlan& p) {
  const StrategyChoice& c = p.choice;
  if (c.swapped.empty() && c.recomputed.empty() && c.lean.empty()) return;
  const int m = p.plan.micro_batch;
  std::size_t swapped = 0, recomputed = 0;
  for (ValueId v : c.swapped) swapped += bytes_at(g, v, m);
  for (ValueId v : c.recomputed) recomputed += bytes_at(g, v, m);
  os << "strategy " << strategy_name(c.requested) << ": " << c.used << " at micro-batch " << m << ": "
     << c.recomputed.size() << " values recomputed (" << format_bytes(recomputed)
     << (c.twice.empty() ? "" : ", " + std::to_string(c.twice.size()) + " of them twice") << "), " << c.swapped.size()
     << " swapped to the host pool (" << format_bytes(swapped) << ")"
     << (c.lean.empty() ? "" : ", " + std::to_string(c.lean.size()) + " steps lean") << "\n"
     << "  memory " << format_bytes(p.plan.memory.total()) << " against " << format_bytes(c.in_memory_total)
     << " in memory; host pool " << format_bytes(p.plan.memory.host_pool) << "\n"
     << std::fixed << std::setprecision(2) << "  predicted step " << c.predicted_seconds * 1e3 << " ms against "
     << c.in_memory_seconds * 1e3 << " ms in memory ("
     << (c.in_memory_seconds > 0 ? 100.0 * (c.predicted_seconds / c.in_memory_seconds - 1) : 0.0)
     << "%); kernel times measured at " << c.costs.measured_batch << " samples, copies at "
     << (c.costs.seconds_per_byte > 0 ? 1e-9 / c.costs.seconds_per_byte : 0.0) << " GB/s"
     << (c.costs.copies_overlap ? ", beside the kernels" : ", in line with the kernels (a CPU copy thread)") << "\n";
  os.unsetf(std::ios::floatfield);
  auto line = [&](const char* what, ValueId v) {
    const Node& n = g.node(g.value(v).producer);
    os << "  " << std::left << std::setw(10) << what << std::setw(34) << g.value(v).name << std::setw(22) << n.def->name
       << std::right << std::setw(12) << format_bytes(bytes_at(g, v, m)) << "\n";
  };
  for (ValueId v : c.recomputed)
    line(std::find(c.twice.begin(), c.twice.end(), v) == c.twice.end() ? "recompute" : "twice", v);
  for (ValueId v : c.swapped) line("swap", v);
  for (const std::string& step : c.lean) os << "  lean      " << step << "\n";
}

}  // namespace crumb
