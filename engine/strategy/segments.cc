#include "engine/strategy/segments.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "engine/base/error.h"
#include "engine/graph/op.h"
#include "engine/graph/saved_values.h"
#include "engine/strategy/recompute.h"

namespace crumb {

std::vector<Segment> segments(const Graph& g) {
  const int forward = first_backward_node(g);
  std::vector<int> last_read(g.num_values(), -1);
  for (NodeId i = 0; i < forward; ++i)
    for (ValueId v : g.node(i).in) last_read[v] = i;
  // A value crosses the cut after node i when it is computed at or before i and read after it. Counting the
  // crossing values per cut, and summing their ids, names the one value of a cut that has one.
  std::vector<long long> count(forward + 1, 0), id_sum(forward + 1, 0);
  for (ValueId v = 0; v < g.num_values(); ++v) {
    const Value& val = g.value(v);
    if (val.kind != ValueKind::Activation || val.producer < 0 || val.producer >= forward || last_read[v] <= val.producer)
      continue;
    count[val.producer] += 1, id_sum[val.producer] += v;
    count[last_read[v]] -= 1, id_sum[last_read[v]] -= v;
  }
  std::vector<Segment> segs;
  long long live = 0, ids = 0;
  int start = 0;
  for (NodeId i = 0; i + 1 < forward; ++i) {
    live += count[i], ids += id_sum[i];
    if (live != 1) continue;
    segs.push_back({start, i, static_cast<ValueId>(ids)});
    start = i + 1;
  }
  segs.push_back({start, forward - 1, -1});
  return segs;
}

std::vector<bool> group_segments(const std::vector<bool>& drop, const SegmentBytes& bytes, std::size_t limit) {
  const std::size_t n = drop.size();
  CRUMB_CHECK(bytes.saved.size() == n && bytes.output.size() == n && bytes.transient.size() == n,
              "group_segments: ", n, " segments, ", bytes.saved.size(), ", ", bytes.output.size(), " and ",
              bytes.transient.size(), " sizes");
  constexpr std::size_t kNone = SIZE_MAX;
  // held[k]: the least bytes kept before segment k with every earlier segment within the limit; from[k]: where
  // the group ending before k began (k - 1 for a kept segment).
  std::vector<std::size_t> held(n + 1, kNone), from(n + 1, 0);
  held[0] = 0;
  for (std::size_t k = 0; k < n; ++k) {
    if (held[k] == kNone) continue;
    if (!drop[k]) {  // kept, with the output of a dropped segment before it
      const std::size_t kept = held[k] + bytes.saved[k] + (k > 0 && drop[k - 1] ? bytes.output[k - 1] : 0);
      if (kept + bytes.transient[k] <= limit && kept < held[k + 1]) held[k + 1] = kept, from[k + 1] = k;
      continue;
    }
    // A group [k, end): its checkpoint is segment k - 1's output, already held when that segment is kept.
    const std::size_t checkpoint = k > 0 && drop[k - 1] ? bytes.output[k - 1] : 0;
    std::size_t group = 0, transient = 0;
    for (std::size_t end = k + 1; end <= n && drop[end - 1]; ++end) {
      group += bytes.saved[end - 1];
      transient = std::max(transient, bytes.transient[end - 1]);
      if (held[k] + checkpoint + group + transient > limit) break;
      if (held[k] + checkpoint < held[end]) held[end] = held[k] + checkpoint, from[end] = k;
    }
  }
  if (held[n] == kNone) return {};
  std::vector<bool> starts(n, false);
  for (std::size_t k = n; k > 0;) {
    const std::size_t begin = from[k];
    if (drop[begin]) starts[begin] = true;
    k = begin;
  }
  return starts;
}

bool cheap_to_recompute(const Graph& g, ValueId v) {
  return recomputable(g, v) && !g.node(g.value(v).producer).def->flops;
}

std::optional<SegmentChoice> choose_segments(const SegmentModel& m, std::size_t limit) {
  const std::size_t n = m.output.size();
  CRUMB_CHECK(m.saved.size() == n && m.saved_light.size() == n && m.peak.size() == n && m.peak_light.size() == n &&
                  m.peak_recomputed.size() == n && m.peak_recomputed_light.size() == n && m.seconds.size() == n &&
                  m.light_seconds.size() == n && m.can_drop.size() == n,
              "choose_segments: the model's fields do not all have ", n, " segments");
  // How a group is computed again: bit 0 nested, bit 1 light; kKeep for a kept segment.
  constexpr int kKeep = -1, kWays = 4;
  struct Label {
    std::size_t held;  // bytes the forward keeps for every later group
    double seconds;    // of recomputation
    int from_k, from_dropped, from_label, way;
  };
  // labels[k][d]: the plans of segments [0, k) with segment k - 1 dropped (d = 1) or not, none beaten on both.
  std::vector<std::array<std::vector<Label>, 2>> labels(n + 1);
  labels[0][0].push_back({0, 0.0, -1, 0, -1, kKeep});
  auto offer = [](std::vector<Label>& to, const Label& l) {
    for (const Label& o : to)
      if (o.held <= l.held && o.seconds <= l.seconds) return;
    to.erase(std::remove_if(to.begin(), to.end(),
                            [&](const Label& o) { return l.held <= o.held && l.seconds <= o.seconds; }),
             to.end());
    to.push_back(l);
  };
  for (std::size_t k = 0; k < n; ++k)
    for (int d = 0; d < 2; ++d)
      for (int li = 0; li < static_cast<int>(labels[k][d].size()); ++li) {
        const Label l = labels[k][d][li];
        // The output of a dropped segment before k is held: kept segment k's backward reads it, or a group
        // beginning at k is computed again from it.
        const std::size_t base = l.held + (d ? m.output[k - 1] : 0);
        if (base + m.peak[k] <= limit) offer(labels[k + 1][0], {base + m.saved[k], l.seconds, int(k), d, li, kKeep});
        std::array<std::size_t, kWays> before{};  // held by the group before segment j, each way
        std::array<double, kWays> seconds{};
        std::array<bool, kWays> fits;  // the group's segments before j fit
        fits.fill(true);
        for (std::size_t end = k + 1; end <= n && m.can_drop[end - 1]; ++end) {
          const std::size_t j = end - 1;
          bool any = false;
          for (int w = 0; w < kWays; ++w) {
            if (!fits[w]) continue;
            const bool nested = w & 1, light = w & 2;
            const std::size_t recomputed = light ? m.peak_recomputed_light[j] : m.peak_recomputed[j];
            // A nested group computes each segment's inner values once more, but its last's.
            seconds[w] += m.seconds[j] + (light ? m.light_seconds[j] : 0.0) + (nested && j > k ? m.seconds[j - 1] : 0.0);
            if (base + before[w] + recomputed <= limit) offer(labels[end][1], {base, l.seconds + seconds[w], int(k), d, li, w});
            // Segment j before the group's last: in a plain group its values are there when its backward
            // begins.
            fits[w] = base + before[w] + (nested ? recomputed : light ? m.peak_light[j] : m.peak[j]) <= limit;
            before[w] += nested ? m.output[j] : light ? m.saved_light[j] : m.saved[j];
            any |= fits[w];
          }
          if (!any) break;
        }
      }
  const Label* best = nullptr;
  for (int d = 0; d < 2; ++d)
    for (const Label& l : labels[n][d])
      if (!best || l.seconds < best->seconds) best = &l;
  if (!best) return std::nullopt;
  SegmentChoice c{std::vector<bool>(n, false), std::vector<bool>(n, false), std::vector<bool>(n, false),
                  std::vector<bool>(n, false)};
  for (std::size_t k = n; k > 0;) {
    const Label& l = *best;
    const std::size_t from = static_cast<std::size_t>(l.from_k);
    if (l.way != kKeep) {
      c.starts[from] = true;
      c.nested[from] = l.way & 1;
      c.light[from] = l.way & 2;
      for (std::size_t j = from; j < k; ++j) c.drop[j] = true;
    }
    best = &labels[from][l.from_dropped][l.from_label];
    k = from;
  }
  return c;
}

SegmentRecompute segment_plan(const Graph& g, const std::vector<Segment>& segs, const SegmentChoice& choice) {
  const std::size_t n = segs.size();
  const std::vector<bool>& drop = choice.drop;
  const std::vector<bool>& starts = choice.starts;
  CRUMB_CHECK(drop.size() == n && starts.size() == n && (choice.nested.empty() || choice.nested.size() == n) &&
                  (choice.light.empty() || choice.light.size() == n),
              "segment_plan: ", n, " segments, ", drop.size(), ", ", starts.size(), ", ", choice.nested.size(),
              " and ", choice.light.size(), " choices");
  // The backward nodes reading each value, in order.
  std::vector<std::vector<NodeId>> readers(g.num_values());
  for (NodeId i = first_backward_node(g); i < g.num_nodes(); ++i)
    for (ValueId v : g.node(i).in) readers[v].push_back(i);
  SegmentRecompute out;
  bool nested = false, light = false;
  for (std::size_t k = 0; k < n; ++k) {
    if (!drop[k]) continue;
    if (starts[k] || k == 0 || !drop[k - 1]) {
      nested = !choice.nested.empty() && choice.nested[k];
      light = !choice.light.empty() && choice.light[k];
    }
    // Inside a group the previous segment's output is computed again from the group's checkpoint.
    if (k > 0 && drop[k - 1] && !starts[k] && recomputable(g, segs[k - 1].output)) out.values.push_back(segs[k - 1].output);
    Refresh inner, cheap;
    NodeId first = -1;  // the first backward node reading an inner value: where the segment is computed again
    for (NodeId i = segs[k].first_node; i <= segs[k].last_node; ++i)
      for (ValueId v : g.node(i).out) {
        if (v == segs[k].output || !recomputable(g, v)) continue;
        out.values.push_back(v);
        inner.values.push_back(v);
        if (!readers[v].empty() && (first < 0 || readers[v].front() < first)) first = readers[v].front();
        if (cheap_to_recompute(g, v)) cheap.values.push_back(v);
      }
    // The last segment of a nested group is computed once, when the group's backward begins.
    const bool last = k + 1 == n || !drop[k + 1] || starts[k + 1];
    if (nested && !last && first >= 0) {
      inner.before = first;
      out.refresh.push_back(std::move(inner));
    }
    // The cheap values are made again from their next reader after the one that computes the segment again.
    if (light && first >= 0) {
      for (ValueId v : cheap.values)
        for (NodeId r : readers[v])
          if (r > first && (cheap.before < 0 || r < cheap.before)) cheap.before = r;
      if (cheap.before >= 0) out.refresh.push_back(std::move(cheap));
    }
  }
  return out;
}

}  // namespace crumb
