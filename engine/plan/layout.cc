#include "engine/plan/layout.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/error.h"
#include "engine/device/widen.h"
#include "engine/graph/op.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/layout.h"

namespace crumb {
namespace {

bool batched_image(const Value& v) { return v.batched && is_image(v); }

// The layout node n runs in.
Layout layout_of(const Graph& g, const Node& n) {
  switch (n.def->layouts) {
    case Layouts::Nhwc:
      for (const auto* list : {&n.in, &n.out})
        for (ValueId v : *list)
          if (batched_image(g.value(v))) return Layout::NHWC;
      return Layout::NCHW;
    case Layouts::Any:
      for (ValueId v : n.in) {
        const Value& x = g.value(v);
        if (batched_image(x) && !layout_free(x)) return x.layout;
      }
      return Layout::NCHW;
    default:
      return Layout::NCHW;
  }
}

// Whether input k of n is a convolution's filter.
bool is_filter(const Node& n, std::size_t k) { return k == 1 && (n.def == &kConv2d || n.def == &kConv2dBwdData); }

// Adds a conversion of `in` to layout `to` writing `out` (named `name`), in the pass of node `beside`.
NodeId add_conversion(Graph& g, ValueId in, ValueId out, Layout to, std::string name, NodeId beside) {
  Node c;
  c.def = &layout_conversion(to);
  c.name = std::move(name);
  c.in = {in};
  c.out = {out};
  c.backward = g.node(beside).backward;
  c.train_only = g.node(beside).train_only;
  return g.add_node(std::move(c));
}

}  // namespace

int to_channels_last(Graph& g) {
  const int original = g.num_nodes();
  for (NodeId i = 0; i < original; ++i)
    CRUMB_CHECK(g.node(i).layout == Layout::NCHW && g.node(i).def != &kToNhwc && g.node(i).def != &kToNchw,
                "to_channels_last: layer '", g.node(i).name, "' is in a channels-last plan already");
  std::map<std::pair<ValueId, Layout>, ValueId> converted;  // (value, layout) -> the conversion's output
  std::set<ValueId> external;  // read by the caller: the gradients of graph inputs
  for (ValueId v : g.inputs())
    if (g.value(v).grad >= 0) external.insert(g.value(v).grad);
  std::vector<NodeId> order;
  order.reserve(original);
  for (NodeId i = 0; i < original; ++i) {
    Layout want = layout_of(g, g.node(i));
    // A layout-agnostic node writing what the caller reads (the cast back to a float32 input's gradient)
    // runs in NCHW; an NHWC node's such output is converted after it (below).
    if (g.node(i).def->layouts == Layouts::Any)
      for (ValueId v : g.node(i).out)
        if (external.count(v)) want = Layout::NCHW;
    for (std::size_t k = 0; k < g.node(i).in.size(); ++k) {
      const ValueId v = g.node(i).in[k];
      const Value& x = g.value(v);
      const bool image = batched_image(x) || (want == Layout::NHWC && is_filter(g.node(i), k));
      if (!image || x.layout == want || layout_free(x)) continue;
      auto [at, added] = converted.try_emplace({v, want}, -1);
      if (added) {
        const std::string name = x.name + (want == Layout::NHWC ? ".to_nhwc" : ".to_nchw");
        at->second = g.add_like(v, name);
        order.push_back(add_conversion(g, v, at->second, want, name, i));
      }
      g.node(i).in[k] = at->second;
    }
    g.node(i).layout = want;
    order.push_back(i);
    for (std::size_t k = 0; k < g.node(i).out.size(); ++k) {
      const ValueId v = g.node(i).out[k];
      if (!batched_image(g.value(v))) continue;
      if (want == Layout::NCHW || !external.count(v) || layout_free(g.value(v))) {
        g.value(v).layout = want;
        continue;
      }
      // The caller reads this value (an input's gradient) in NCHW: the node writes an NHWC value that a
      // conversion then writes into it.
      const ValueId inner = g.add_like(v, g.value(v).name + ".nhwc");
      g.value(inner).layout = Layout::NHWC;
      g.value(inner).producer = i;
      g.value(v).producer = -1;
      g.node(i).out[k] = inner;
      order.push_back(add_conversion(g, inner, v, Layout::NCHW, g.value(v).name + ".to_nchw", i));
    }
  }
  g.reorder(order);
  return g.num_nodes() - original;
}

}  // namespace crumb
