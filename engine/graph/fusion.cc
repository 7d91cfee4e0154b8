#include "engine/graph/fusion.h"

#include <algorithm>

#include "engine/base/error.h"

namespace crumb {
namespace {
// A function-local static: filled by the op families' load-time registrations, whatever their order.
std::vector<FusionRule>& table() {
  static std::vector<FusionRule> rules;
  return rules;
}
std::vector<const OpDef*>& in_place_table() {
  static std::vector<const OpDef*> ops;
  return ops;
}
}  // namespace

void add_in_place_op(const OpDef& op) { in_place_table().push_back(&op); }

bool in_place_op(const OpDef& op) {
  const std::vector<const OpDef*>& ops = in_place_table();
  return std::find(ops.begin(), ops.end(), &op) != ops.end();
}

void add_fusion_rule(const FusionRule& rule) {
  CRUMB_CHECK(rule.name && rule.apply, "a fusion rule needs a name and a rewrite");
  for (const FusionRule& r : table())
    CRUMB_CHECK(std::string(r.name) != rule.name, "fusion rule '", rule.name, "' is registered twice");
  table().push_back(rule);
}

std::vector<FusionRule> fusion_rules() {
  std::vector<FusionRule> rules = table();
  std::stable_sort(rules.begin(), rules.end(), [](const FusionRule& a, const FusionRule& b) { return a.order < b.order; });
  return rules;
}

int fuse(Graph& g) {
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    CRUMB_CHECK(n.layout == Layout::NCHW && !n.train_only, "fuse: layer '", n.name,
                "' comes from a layout or memory rewrite; fuse the graph right after build_backward");
  }
  int fused = 0;
  for (const FusionRule& r : fusion_rules()) fused += r.apply(g);
  return fused;
}

Readers::Readers(const Graph& g) : readers_(g.num_values()), loss_(g.loss()) {
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    for (ValueId v : g.node(i).in) readers_[v].push_back(i);
}

NodeId Readers::only(ValueId v) const {
  const std::vector<NodeId>& r = readers_.at(v);
  return r.size() == 1 && v != loss_ ? r[0] : -1;
}

std::string fused_name(const std::string& first_layer, const std::vector<std::string>& ops) {
  std::string name = first_layer;
  for (const std::string& op : ops) name += "+" + op;
  return name;
}

}  // namespace crumb
