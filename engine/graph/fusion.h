// Fusion: a rewrite of a training graph after autograd, before the channels-last rewrite, the memory
// strategies and planning, that replaces chains of ops by fused ops (docs/architecture.md, Fusion). A
// fused op is an ordinary op, declared once with rows per device and dtype, or an op with an epilogue in
// its attributes (a convolution's ReLU: engine/ops/relu_epilogue.h); it computes the chain's outputs in
// fewer passes over memory and keeps fewer intermediate values. Which chains fuse is decided
// by rules that each op family registers from its own files when the library loads (CRUMB_ON_LOAD), as
// it registers its rows: a rule matches the chain in the forward pass and its backward nodes together and
// replaces both. Fusion changes rounding order at most, never what micro-batching or a memory strategy
// computes; parameters, state and checkpoints are untouched (fusion is a matter of the plan).
#pragma once
#include <string>
#include <vector>

#include "engine/graph/graph.h"
#include "engine/graph/op.h"

namespace crumb {

struct FusionRule {
  const char* name;  // the chain it fuses, e.g. "batch_norm+add+relu"
  // Rules run by increasing order, so a longer chain is matched before a rule for its prefix takes it.
  int order = 0;
  // Rewrites every match in g; returns how many chains it fused.
  int (*apply)(Graph& g) = nullptr;
};

// Adds a rule to the table (from the file that defines its fused ops, at load time).
void add_fusion_rule(const FusionRule& rule);
// Every rule, in the order they run.
std::vector<FusionRule> fusion_rules();

// Applies every rule to g, a graph after build_backward and before any layout or memory rewrite; returns
// the chains fused. A forward-only graph fuses its forward chains alone.
int fuse(Graph& g);

// Fused ops whose output a fused plan computes again in the backward pass instead of keeping it, because
// it is cheap to compute from the input the backward keeps anyway (In-Place ABN's memory: a normalisation
// -> ReLU chain keeps one tensor where it kept two; engine/strategy/in_place.h). Their families mark them
// when the library loads, as they register their rules.
void add_in_place_op(const OpDef& op);
bool in_place_op(const OpDef& op);

// Which nodes read each value, for rules matching chains (a node reading a value twice is listed twice).
class Readers {
 public:
  explicit Readers(const Graph& g);
  const std::vector<NodeId>& of(ValueId v) const { return readers_.at(v); }
  // The one node reading v, or -1 when none or several do (or v is the graph's loss).
  NodeId only(ValueId v) const;

 private:
  std::vector<std::vector<NodeId>> readers_;
  ValueId loss_;
};

// The step name of a fused chain: the first layer's name and the other ops' names, "layer1.0.bn2+add+relu".
std::string fused_name(const std::string& first_layer, const std::vector<std::string>& ops);

}  // namespace crumb
