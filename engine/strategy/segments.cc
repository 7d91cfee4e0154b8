#include "engine/strategy/segments.h"

#include <algorithm>
#include <cstdint>

#include "engine/base/error.h"
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

std::vector<ValueId> segment_plan(const Graph& g, const std::vector<Segment>& segs, const std::vector<bool>& drop,
                                  const std::vector<bool>& starts) {
  CRUMB_CHECK(drop.size() == segs.size() && starts.size() == segs.size(), "segment_plan: ", segs.size(),
              " segments, ", drop.size(), " and ", starts.size(), " choices");
  std::vector<ValueId> values;
  for (std::size_t k = 0; k < segs.size(); ++k) {
    if (!drop[k]) continue;
    // Inside a group the previous segment's output is computed again from the group's checkpoint.
    if (k > 0 && drop[k - 1] && !starts[k] && recomputable(g, segs[k - 1].output)) values.push_back(segs[k - 1].output);
    for (NodeId i = segs[k].first_node; i <= segs[k].last_node; ++i)
      for (ValueId v : g.node(i).out)
        if (v != segs[k].output && recomputable(g, v)) values.push_back(v);
  }
  return values;
}

}  // namespace crumb
