#include "tests/ops/registry.h"

#include <algorithm>
#include <string>

#include "engine/base/error.h"
#include "engine/graph/autograd.h"
#include "engine/graph/saved_values.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/ops/softmax_xent.h"
#include "engine/strategy/recompute.h"

namespace crumb::test {
namespace {
// A function-local static: filled by the case files' load-time registrations, whatever their order.
std::vector<OpCase>& registry() {
  static std::vector<OpCase> cases;
  return cases;
}
}  // namespace

void add_op_cases(const std::vector<OpCase>& cases) {
  std::vector<OpCase>& all = registry();
  for (const OpCase& c : cases) {
    CRUMB_CHECK(std::none_of(all.begin(), all.end(), [&](const OpCase& o) { return std::string(o.name) == c.name; }),
                "op case '", c.name, "' is registered twice (tests/ops/*_cases.cc): give it another name");
    all.push_back(c);
  }
}

const std::vector<OpCase>& op_cases() { return registry(); }

Graph op_graph(const OpCase& c, DType dtype) {
  Graph g;
  g.set_float_dtype(dtype);
  const ValueId x = g.input("x", c.x_dims, dtype, /*requires_grad=*/true);
  const ValueId y = g.input("y", {}, DType::I32);
  ValueId h = c.body(g, x);
  if (g.value(h).dims.size() != 1) h = nn::flatten(g, h, "flat");
  nn::softmax_cross_entropy(g, h, y, "loss");
  build_backward(g);
  if (c.rewrite) c.rewrite(g);
  return g;
}

std::vector<ValueId> all_recomputable(const Graph& g) {
  std::vector<bool> saved(g.num_values(), false), chosen(g.num_values(), false);
  for (const SavedValue& s : saved_values(g)) saved[s.value] = true;
  for (const SavedValue& s : saved_values(g)) {
    const std::vector<ValueId> closure = recompute_closure(g, s.value, saved);
    if (std::none_of(closure.begin(), closure.end(), [&](ValueId v) {
          const OpDef* def = g.node(g.value(v).producer).def;
          return def == &kConv2d || def == &kLinear;
        }))
      for (ValueId v : closure) chosen[v] = true;
  }
  std::vector<ValueId> out;
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (chosen[v]) out.push_back(v);
  return out;
}

std::vector<ValueId> all_saved(const Graph& g) {
  std::vector<ValueId> out;
  for (const SavedValue& s : saved_values(g)) out.push_back(s.value);
  return out;
}

ValueId frozen_conv_bn(Graph& g, ValueId x) {
  BatchNormAttrs a;
  a.frozen = true;
  const ValueId h = nn::batch_norm2d(g, nn::conv2d(g, x, 3, 3, "conv", nn::ConvOptions().with_pad(1)), "bn", a);
  g.value(g.find_value("bn.running_mean")).init.fill = 0.3;
  g.value(g.find_value("bn.running_var")).init.fill = 2.5;
  return h;
}

SwapTiming swap_window(std::size_t window) {
  SwapTiming t;
  t.window_bytes = window;
  return t;
}

}  // namespace crumb::test
