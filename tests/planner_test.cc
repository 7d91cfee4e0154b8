// The arena plan: no two values that are live at the same time share bytes (except a view and its
// base, or an in-place op's input and output at the one step that hands the buffer over), and the
// arena stays close to its lower bound.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/base/error.h"
#include "engine/run/executor.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/graph/op.h"
#include "engine/train/model_registry.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

// True if step s hands a's storage over to b in place (a is the op's input 0, b its output).
bool handed_over(const Graph& g, const MemoryPlan& p, ValueId a, ValueId b) {
  if (p.last[a] != p.first[b]) return false;
  const Node& n = g.node(p.order[p.first[b]]);
  return n.def->inplace && g.storage_root(n.in[0]) == g.storage_root(a) && g.storage_root(n.out[0]) == g.storage_root(b);
}

// A step's workspace (always in the arena) overlaps no arena value live at that step.
void expect_workspace_free(const Graph& g, const MemoryPlan& p, int batch) {
  for (size_t s = 0; s < p.order.size(); ++s) {
    if (!p.step_workspace[s]) continue;
    const int64_t w0 = p.workspace_offset[s], w1 = w0 + (int64_t)p.step_workspace[s];
    EXPECT_LE(w1, (int64_t)p.arena_bytes);
    for (ValueId v = 0; v < g.num_values(); ++v) {
      if (p.offset[v] < 0 || p.space[v] != MemorySpace::Arena || p.first[v] > (int)s || p.last[v] < (int)s) continue;
      const int64_t v1 = p.offset[v] + g.value(v).count(batch) * (int64_t)dtype_size(g.value(v).dtype);
      EXPECT_FALSE(p.offset[v] < w1 && w0 < v1) << "workspace of step " << s << " overlaps live '" << g.value(v).name << "'";
    }
  }
}

void expect_no_overlap(const Graph& g, const MemoryPlan& p, int batch) {
  expect_workspace_free(g, p, batch);
  for (ValueId a = 0; a < g.num_values(); ++a) {
    if (p.offset[a] < 0) continue;
    EXPECT_EQ(p.offset[a] % kArenaAlign, 0);
    const int64_t a_end = p.offset[a] + g.value(a).count(batch) * (int64_t)dtype_size(g.value(a).dtype);
    EXPECT_LE(a_end, (int64_t)(p.space[a] == MemorySpace::Arena ? p.arena_bytes : p.host_pool_bytes));
    for (ValueId b = a + 1; b < g.num_values(); ++b) {
      if (p.offset[b] < 0 || p.space[b] != p.space[a]) continue;  // each space is its own address range
      const int64_t b_end = p.offset[b] + g.value(b).count(batch) * (int64_t)dtype_size(g.value(b).dtype);
      const bool bytes_overlap = p.offset[a] < b_end && p.offset[b] < a_end;
      const bool time_overlap = p.first[a] <= p.last[b] && p.first[b] <= p.last[a];
      if (!bytes_overlap || !time_overlap) continue;
      const bool same_storage = g.storage_root(a) == g.storage_root(b);
      EXPECT_TRUE(same_storage || handed_over(g, p, a, b) || handed_over(g, p, b, a))
          << "'" << g.value(a).name << "' [" << p.first[a] << ", " << p.last[a] << "] and '" << g.value(b).name << "' ["
          << p.first[b] << ", " << p.last[b] << "] share bytes while both live";
    }
  }
}

TEST(Planner, LiveValuesNeverOverlapInReferenceModels) {
  for (const std::string& name : models::names()) {
    for (int batch : {1, 7, 64}) {
      SCOPED_TRACE(name + " batch " + std::to_string(batch));
      Graph g = models::build(name, test::spec_for(name));
      build_backward(g);
      for (Pass pass : {Pass::Train, Pass::Eval})
        expect_no_overlap(g, compile_pass(g, pass, batch, Device::CPU).plan, batch);
    }
  }
}

TEST(Planner, BranchyGraphNeverOverlaps) {
  // A value with several consumers must not be overwritten in place while another still needs it.
  Graph g;
  const ValueId x = g.input("x", {3, 8, 8});
  const ValueId y = g.input("y", {}, DType::I32);
  const ValueId c = nn::conv2d(g, x, 4, 3, "c1", nn::ConvOptions().with_pad(1));
  const ValueId r = nn::relu(g, c, "r1");  // c is still read by the add below: no in-place here
  const ValueId s =
      nn::add(g, nn::relu(g, nn::conv2d(g, r, 4, 3, "c2", nn::ConvOptions().with_pad(1)), "r2"), c, "sum");
  nn::softmax_cross_entropy(g, nn::linear(g, nn::flatten(g, nn::global_avg_pool(g, s, "gap"), "f"), 5, "fc"), y, "loss");
  build_backward(g);
  const MemoryPlan p = compile_pass(g, Pass::Train, 5, Device::CPU).plan;
  expect_no_overlap(g, p, 5);
  EXPECT_NE(p.offset[c], p.offset[r]) << "relu overwrote an input that the add still reads";
}

TEST(Planner, InPlaceReluReusesItsInput) {
  Graph g = models::build("lenet5");
  build_backward(g);
  const MemoryPlan p = compile_pass(g, Pass::Train, 8, Device::CPU).plan;
  int relus = 0;
  for (NodeId id : p.order) {
    const Node& n = g.node(id);
    if (n.def != &kRelu) continue;
    ++relus;
    EXPECT_EQ(p.offset[n.in[0]], p.offset[n.out[0]]) << "relu '" << n.name << "' should run in place";
  }
  EXPECT_EQ(relus, 4);
}

TEST(Planner, ArenaCloseToLowerBound) {
  for (const std::string& name : models::names()) {
    Graph g = models::build(name, test::spec_for(name));
    build_backward(g);
    const MemoryPlan p = compile_pass(g, Pass::Train, 64, Device::CPU).plan;
    EXPECT_LE(p.ratio(), 1.10) << name << ": arena " << p.arena_bytes << " vs lower bound " << p.lower_bound;
    EXPECT_GE(p.arena_bytes, p.lower_bound);
  }
}

// A chain of n linear layers and its backward graph: thousands of activations live at once at the turn
// from forward to backward.
Graph deep_chain(int n) {
  Graph g;
  ValueId h = nn::flatten(g, g.input("x", {1, 4, 4}), "f");
  const ValueId y = g.input("y", {}, DType::I32);
  for (int i = 0; i < n; ++i) h = nn::linear(g, h, 8, "l" + std::to_string(i));
  nn::softmax_cross_entropy(g, nn::linear(g, h, 4, "fc"), y, "loss");
  build_backward(g);
  return g;
}

// Past the size where the sorted orders' O(blocks^2) placements would take minutes (a 16,000-layer chain
// took 47 s, and the memory strategies' searches plan hundreds of times), the planner sweeps by first
// step alone: still no overlaps, still at the lower bound on a chain, and in time that grows with the graph.
TEST(Planner, DeepGraphsPlanFastAndSound) {
  {
    const Graph g = deep_chain(1500);  // ~3,000 blocks: the sweep alone
    const MemoryPlan p = compile_pass(g, Pass::Train, 3, Device::CPU).plan;
    expect_no_overlap(g, p, 3);
    expect_workspace_free(g, p, 3);
    EXPECT_LE(p.ratio(), 1.01) << "arena " << p.arena_bytes << " vs lower bound " << p.lower_bound;
  }
  const Graph g = deep_chain(20000);
  const auto start = std::chrono::steady_clock::now();
  const MemoryPlan p = compile_pass(g, Pass::Train, 3, Device::CPU).plan;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  EXPECT_LE(p.ratio(), 1.01);
}

TEST(Planner, ArenaGrowsWithBatch) {
  Graph g = models::build("cnn");
  build_backward(g);
  size_t prev = 0;
  for (int b : {1, 2, 8, 32, 64}) {
    const size_t bytes = compile_pass(g, Pass::Train, b, Device::CPU).plan.arena_bytes;
    EXPECT_GT(bytes, prev);
    prev = bytes;
  }
}

// A second memory space: values marked for the host pool (Value::host) are planned there (a later swap schedule keeps
// saved activations there between forward and backward), the arena shrinks by what moved, neither space
// overlaps live values, and a run gives the same bits as the all-arena plan.
TEST(Planner, HostPoolHoldsWhatItIsGivenAndRunsAreUnchanged) {
  Graph g = models::build("lenet5", {1, 16, 16, 4}, DType::F64);
  build_backward(g);
  const int batch = 5;
  const CompiledPass arena_only = compile_pass(g, Pass::Train, batch, Device::CPU);
  // Every activation that owns its storage and lives across the forward/backward boundary.
  int forward_end = 0;
  while (!g.node(arena_only.plan.order[forward_end]).backward) ++forward_end;
  std::vector<ValueId> saved;
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (arena_only.plan.first[v] >= 0 && arena_only.plan.first[v] < forward_end &&
        arena_only.plan.last[v] >= forward_end && g.storage_root(v) == v)
      saved.push_back(v);
  ASSERT_GE(saved.size(), 3u);
  // The same graph with those values marked for the host pool.
  auto hosting = [&](const std::vector<ValueId>& values) {
    Graph h = g;
    for (ValueId v : values) h.value(v).host = true;
    return h;
  };
  const Graph hosted = hosting(saved);
  const CompiledPass split = compile_pass(hosted, Pass::Train, batch, Device::CPU);
  expect_no_overlap(g, split.plan, batch);
  for (ValueId v : saved) EXPECT_EQ(split.plan.space[v], MemorySpace::HostPool) << g.value(v).name;
  EXPECT_GT(split.plan.host_pool_bytes, 0u);
  EXPECT_LT(split.plan.arena_bytes, arena_only.plan.arena_bytes);

  auto run = [&](const Graph& graph, CompiledPass pass) {
    ParamStore params(graph);
    params.init(4);
    Arena arena;
    Executor e(graph, params, arena, std::move(pass));
    std::vector<double> x(g.value(g.find_value("x")).count(batch));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37 * double(i));
    std::vector<int32_t> y = {0, 1, 2, 3, 1};
    e.bind(g.find_value("x"), x.data());
    e.bind(g.find_value("y"), y.data());
    e.run(batch, true, true, 1.0 / batch);
    const double* gp = static_cast<const double*>(params.grad_block());
    std::vector<double> out(gp, gp + params.count());
    out.push_back(e.results().loss_sum);
    return out;
  };
  EXPECT_EQ(run(hosted, compile_pass(hosted, Pass::Train, batch, Device::CPU)),
            run(g, compile_pass(g, Pass::Train, batch, Device::CPU)));
  // Only values that own their storage can move: a view shares its base's space.
  std::vector<ValueId> view;
  for (ValueId v = 0; v < g.num_values(); ++v)
    if (g.value(v).view_of >= 0 && g.value(g.storage_root(v)).kind == ValueKind::Activation) view.push_back(v);
  ASSERT_FALSE(view.empty());
  view.resize(1);
  EXPECT_THROW(compile_pass(hosting(view), Pass::Train, batch, Device::CPU), Error);
}

}  // namespace
}  // namespace crumb
