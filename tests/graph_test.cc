// The op declarations: typed outputs, attributes and geometry on nodes, and the implementation table.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>

#include "engine/graph/autograd.h"
#include "engine/graph/fusion.h"
#include "engine/base/error.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/ops/swap.h"
#include "engine/graph/op.h"
#include "engine/train/model_registry.h"
#include "tests/ops/registry.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

TEST(Ops, OutputsTakeTheDtypesTheOpDeclares) {
  Graph g;
  const ValueId x = g.input("x", {2, 8, 8});
  const ValueId y = g.input("y", {}, DType::I32);
  const ValueId p = nn::max_pool2d(g, x, 2, 2, "pool");
  const Node& pool = g.node(g.value(p).producer);
  ASSERT_EQ(pool.out.size(), 2u);
  EXPECT_EQ(g.value(pool.out[0]).dtype, DType::F32);
  EXPECT_EQ(g.value(pool.out[1]).dtype, DType::U8);  // the argmax, declared by the op, not by the caller
  nn::softmax_cross_entropy(g, nn::linear(g, nn::flatten(g, p, "flat"), 3, "fc"), y, "loss");
  const Node& loss = g.node(g.value(g.loss()).producer);
  ASSERT_EQ(loss.out.size(), 3u);
  for (int i : {1, 2}) {
    const Value& m = g.value(loss.out[i]);
    EXPECT_EQ(m.kind, ValueKind::Metric);
    EXPECT_FALSE(m.batched);
    EXPECT_EQ(m.count(1000), 1);
  }
  EXPECT_EQ(g.value(loss.out[1]).dtype, DType::F64);
  EXPECT_EQ(g.value(loss.out[2]).dtype, DType::I64);
}

TEST(Ops, AWronglyTypedOutputIsAnErrorNamingTheLayer) {
  Graph g;
  const ValueId x = g.input("x", {2, 8, 8});
  Node n;
  n.def = &kMaxPool2d;
  n.name = "pool";
  n.in = {x};
  n.attrs = WindowAttrs{2, 2, 2, 2, 0, 0};
  for (DType t : {DType::F32, DType::F32}) {  // the argmax must be U8
    Value v;
    v.name = "out";
    v.dtype = t;
    v.batched = true;
    n.out.push_back(g.add_value(v));
  }
  try {
    g.add_node(n);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 'pool' (max_pool2d)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("U8"), std::string::npos) << e.what();
  }
  n.out.pop_back();  // and the argmax is not optional
  EXPECT_THROW(g.add_node(n), Error);
}

TEST(Ops, MissingAttributesAreAnError) {
  Graph g;
  const ValueId x = g.input("x", {2, 8, 8});
  EXPECT_THROW(g.apply(kAvgPool2d, {x}, "pool"), Error);
  EXPECT_THROW(g.apply(kAvgPool2d, {x}, "pool", ReshapeAttrs{{4}}), Error);  // the wrong struct
}

// Backward nodes carry the geometry their forward computed; their shape rules never derive it again.
TEST(Ops, BackwardNodesCarryTheForwardGeometry) {
  Graph g = models::build("lenet5");
  build_backward(g);
  int checked = 0;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (!n.backward || !n.geometry.has_value()) continue;
    const std::string fwd_name = n.name.substr(0, n.name.find(".backward"));
    for (NodeId j = 0; j < g.num_nodes(); ++j) {
      const Node& f = g.node(j);
      if (f.backward || f.name != fwd_name) continue;
      if (const auto* s = std::any_cast<cpu::Conv2dShape>(&n.geometry)) {
        const auto& t = std::any_cast<const cpu::Conv2dShape&>(f.geometry);
        EXPECT_EQ(std::memcmp(s, &t, sizeof t), 0) << n.name;
        ++checked;
      } else if (const auto* p = std::any_cast<cpu::Pool2dShape>(&n.geometry)) {
        const auto& t = std::any_cast<const cpu::Pool2dShape&>(f.geometry);
        EXPECT_EQ(std::memcmp(p, &t, sizeof t), 0) << n.name;
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 5);  // 2 conv layers x 2 backward nodes (the first has no data gradient) + 2 pools
}

// Every op of g has CPU rows in both float dtypes, and CUDA float32 rows in a CUDA build; views have none
// anywhere. CUDA has no float64 rows but for the swap ops, byte copies that every device binds for every dtype.
void expect_rows(const Graph& g, const std::string& what) {
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const OpDef& op = *g.node(i).def;
    SCOPED_TRACE(what + ": " + op.name);
    const bool rows = !op.view;
    EXPECT_EQ(impl_table().find(op, Device::CPU, DType::F32) != nullptr, rows);
    EXPECT_EQ(impl_table().find(op, Device::CPU, DType::F64) != nullptr, rows);
#if CRUMB_HAVE_CUDA && CRUMB_HAVE_CUDNN  // a CUDA build without cuDNN has no convolutions
    EXPECT_EQ(impl_table().find(op, Device::CUDA, DType::F32) != nullptr, rows);
#endif
    const bool copy = &op == &kSwapCopy || &op == &kSwapWait;
    EXPECT_EQ(impl_table().find(op, Device::CUDA, DType::F64) != nullptr, copy);
  }
}

std::set<std::string> op_names(const Graph& g) {
  std::set<std::string> names;
  for (NodeId i = 0; i < g.num_nodes(); ++i) names.insert(g.node(i).def->name);
  return names;
}

// A reference model's training graph, fused (engine/graph/fusion.h) or not.
Graph model_graph(const std::string& name, bool fused) {
  Graph g = models::build(name, test::spec_for(name));
  build_backward(g);
  if (fused) fuse(g);
  return g;
}

TEST(Ops, ImplementationTableCoversTheReferenceModels) {
  for (const std::string& name : models::names())
    for (bool fused : {false, true}) expect_rows(model_graph(name, fused), name + (fused ? " fused" : ""));
}

// The op cases (tests/ops) reach the ops no reference model uses (the swap and recompute ops), and every op
// a model uses, forward and backward, is one they test.
TEST(Ops, ImplementationTableCoversTheOpCases) {
  std::set<std::string> tested;
  for (const test::OpCase& c : test::op_cases()) {
    const Graph g = test::op_graph(c, DType::F32);
    expect_rows(g, c.name);
    const std::set<std::string> ops = op_names(g);
    tested.insert(ops.begin(), ops.end());
  }
  for (const char* op : {"swap_copy", "swap_wait", "batch_norm_apply", "batch_norm_apply_relu"})
    EXPECT_EQ(tested.count(op), 1u) << op;
  for (const std::string& name : models::names())
    for (bool fused : {false, true})
      for (const std::string& op : op_names(model_graph(name, fused)))
        EXPECT_EQ(tested.count(op), 1u) << name << (fused ? " fused" : "") << " uses " << op;
}

}  // namespace
}  // namespace crumb
