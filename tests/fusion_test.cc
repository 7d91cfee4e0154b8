// Fusion (engine/graph/fusion.h): the pass rewrites the chains the families' rules name, fused training
// steps compute what unfused ones do on every model, micro-batching and the memory strategies keep their
// promises with fusion on, and the parameters and state a checkpoint holds do not change.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/graph/autograd.h"
#include "engine/graph/fusion.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/norm.h"
#include "engine/ops/softmax_xent.h"
#include "engine/strategy/in_place.h"
#include "engine/strategy/memory_strategy.h"
#include "engine/train/trainer.h"
#include "engine/train/model_registry.h"
#include "engine/train/scheduler.h"
#include "tests/batch_outcome.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

constexpr int kClasses = 4;

// How a graph is planned: unfused, fused keeping every value the backward reads, or fused with In-Place
// memory (the fused normalisations keep their inputs alone, engine/strategy/in_place.h).
enum class Fusing { Unfused, Fused, InPlace };

Graph build(const std::string& model, const models::NormSpec& norm, Fusing plan, int channels = 3, int size = 16) {
  const int side = std::max(size, models::min_image_size(model));
  Graph g = models::build(model, {channels, side, side, kClasses, norm});
  build_backward(g);
  if (plan != Fusing::Unfused) fuse(g);
  if (plan == Fusing::InPlace) recompute_in_place(g);
  return g;
}

std::map<std::string, int> op_counts(const Graph& g) {
  std::map<std::string, int> n;
  for (NodeId i = 0; i < g.num_nodes(); ++i) ++n[g.node(i).def->name];
  return n;
}

TEST(Fusion, RulesAreRegisteredByTheirFamilies) {
  std::vector<std::string> names;
  for (const FusionRule& r : fusion_rules()) names.push_back(r.name);
  for (const char* rule :
       {"batch_norm+add+relu", "batch_norm+relu", "group_norm+add+relu", "group_norm+relu", "conv2d+relu", "linear+relu"})
    EXPECT_NE(std::find(names.begin(), names.end(), rule), names.end()) << rule;
  EXPECT_THROW(add_fusion_rule({"batch_norm+relu", 0, [](Graph&) { return 0; }}), Error);
}

// resnet20: the stem's and every block's first BatchNorm fuse with their ReLU, every block's end with its add
// and ReLU (the downsampling blocks' main branch; their shortcut's BatchNorm stays), and their backward nodes
// with them, the downsampling blocks' ends too: the fused backward reads y, not the residual.
TEST(Fusion, ResnetBlocksFuseForwardAndBackward) {
  const Graph plain = build("resnet20", {}, Fusing::Unfused), g = build("resnet20", {}, Fusing::Fused);
  std::map<std::string, int> n = op_counts(g), before = op_counts(plain);
  EXPECT_EQ(n["batch_norm_relu"], 10);
  EXPECT_EQ(n["batch_norm_add_relu"], 9);
  EXPECT_EQ(n["batch_norm_relu_backward"], 10);
  EXPECT_EQ(n["batch_norm_add_relu_backward"], 9);
  EXPECT_EQ(n["batch_norm"], 2);  // layer2.0 and layer3.0's downsample.1
  EXPECT_EQ(n["batch_norm_backward"], 2);
  EXPECT_EQ(n["relu"], 0);
  EXPECT_EQ(n["relu_backward"], 0);
  EXPECT_EQ(n["add"], before["add"] - 9) << "the gradient sums stay";
  EXPECT_EQ(g.num_nodes(), plain.num_nodes() - 10 - 9 * 2 - 10 - 9);
  bool named = false;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    named = named || g.node(i).name == "layer1.0.bn2+add+relu";
    EXPECT_NE(g.node(i).name, "layer1.0.relu2");
  }
  EXPECT_TRUE(named);
  Graph again = g;
  EXPECT_EQ(fuse(again), 0) << "a fused graph has nothing left to fuse";
}

TEST(Fusion, GroupNormChainsFuse) {
  models::NormSpec gn;
  gn.kind = models::NormSpec::Kind::Group;
  gn.gn_groups = 4;
  std::map<std::string, int> n = op_counts(build("resnet20", gn, Fusing::Fused));
  EXPECT_EQ(n["group_norm_relu"], 10);
  EXPECT_EQ(n["group_norm_add_relu"], 9);
  EXPECT_EQ(n["group_norm_relu_backward"], 10);
  EXPECT_EQ(n["group_norm_add_relu_backward"], 9);
  EXPECT_EQ(n["relu"], 0);
}

// A ReLU whose input another layer also reads does not fuse: the normalised value must be kept.
TEST(Fusion, ChainsWithOtherReadersStay) {
  Graph g;
  const ValueId x = g.input("x", {2, 3, 3}, DType::F32, true);
  const ValueId y = g.input("y", {}, DType::I32);
  const ValueId h = nn::batch_norm2d(g, x, "bn");
  const ValueId r = nn::relu(g, h, "relu");
  nn::softmax_cross_entropy(g, nn::flatten(g, nn::add(g, r, h, "add"), "flat"), y, "loss");
  build_backward(g);
  EXPECT_EQ(fuse(g), 0);
}

TEST(Fusion, RunsRightAfterAutograd) {
  Graph g = build("resnet20", {}, Fusing::Unfused);
  g.node(0).layout = Layout::NHWC;
  EXPECT_NE(test::error_of([&] { fuse(g); }).find("fuse the graph right after build_backward"), std::string::npos);
}

// Fusion is a matter of the plan: the model's parameters and state, which checkpoints hold, are the same.
TEST(Fusion, ParametersAndStateAreUnchanged) {
  const Graph plain = build("resnet20", {}, Fusing::Unfused), g = build("resnet20", {}, Fusing::Fused);
  auto listed = [](const Graph& gr, const std::vector<ValueId>& vs) {
    std::vector<std::pair<std::string, Dims>> out;
    for (ValueId v : vs) out.emplace_back(gr.value(v).name, gr.value(v).dims);
    return out;
  };
  EXPECT_EQ(listed(g, g.params()), listed(plain, plain.params()));
  EXPECT_EQ(listed(g, g.states()), listed(plain, plain.states()));
}

void expect_same_bits(const test::BatchOutcome& got, const test::BatchOutcome& want) {
  EXPECT_EQ(got.loss_sum, want.loss_sum);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  EXPECT_EQ(0, std::memcmp(got.grads.data(), want.grads.data(), got.grads.size() * sizeof(float)))
      << "relative error " << test::relative_error(got.grads, want.grads);
  EXPECT_EQ(got.state, want.state);
  EXPECT_EQ(got.tracked, want.tracked);
}

// One training step fused (keeping every value, and In-Place) and unfused, from the same weights and batch,
// in two micro-batches: a fused op rounds each part as the separate ops do, its backward computes the ReLU's
// mask again exactly, and an In-Place output is computed again from the statistics the forward stored, so
// on the CPU the bits are the same (the promise is 1e-5 relative; equality is what the kernels give).
void expect_fusion_keeps_the_step(const std::string& model, bool group_norm, int batch) {
  SCOPED_TRACE(model + (group_norm ? " with GroupNorm" : ""));
  models::NormSpec norm;
  norm.bn.group = batch / 2;
  if (group_norm) norm.kind = models::NormSpec::Kind::Group, norm.gn_groups = 4;
  const int channels = model == "mlp" || model == "lenet5" ? 1 : 3;
  const test::BatchOutcome want = test::run_one_batch(build(model, norm, Fusing::Unfused, channels), batch / 2, batch, kClasses);
  for (Fusing plan : {Fusing::Fused, Fusing::InPlace}) {
    SCOPED_TRACE(plan == Fusing::Fused ? "fused" : "In-Place");
    expect_same_bits(test::run_one_batch(build(model, norm, plan, channels), batch / 2, batch, kClasses), want);
  }
}

TEST(Fusion, OneStepEqualsUnfusedOnEveryModel) {
  for (const std::string& model : models::names()) {
    if (model == "vgg11_bn") continue;  // below
    expect_fusion_keeps_the_step(model, false, 8);
    if (models::has_norm(model)) expect_fusion_keeps_the_step(model, true, 8);
  }
}

// vgg11_bn's 129M-parameter classifier makes a run seconds long: its BatchNorm runs only.
TEST(Fusion, OneStepEqualsUnfusedVgg11Bn) { expect_fusion_keeps_the_step("vgg11_bn", false, 4); }

// Micro-batching stays exact with fusion: BatchNorm groups of 8 give the batch's gradients and statistics
// at every micro-batch size that holds whole groups, ragged last micro-batch included.
TEST(Fusion, MicroBatchInvariance) {
  models::NormSpec norm;
  norm.bn.group = 8;
  const Graph g = build("resnet20", norm, Fusing::InPlace);
  const test::BatchOutcome whole = test::run_one_batch(g, 44, 44, kClasses);
  for (int m : {8, 16, 24}) {
    SCOPED_TRACE("micro-batch " + std::to_string(m));
    const test::BatchOutcome got = test::run_one_batch(g, m, 44, kClasses);
    EXPECT_NEAR(got.loss_sum, whole.loss_sum, 1e-5 * whole.loss_sum);
    EXPECT_LE(test::relative_error(got.grads, whole.grads), 1e-5);
    EXPECT_LE(test::relative_error(got.state, whole.state), 1e-5);
    EXPECT_EQ(got.tracked, whole.tracked);
  }
}

// Swapping and recomputing fused values give the bits of keeping them: the memory strategies work on a
// fused graph as on any other, In-Place or not.
TEST(Fusion, StrategiesKeepTheirBits) {
  for (Fusing plan : {Fusing::Fused, Fusing::InPlace}) {
  SCOPED_TRACE(plan == Fusing::Fused ? "fused" : "In-Place");
  models::NormSpec norm;
  norm.bn.group = 4;
  const Graph g = build("resnet20", norm, plan);
  auto run = [&](Strategy s, std::size_t budget) {
    Graph copy = g;
    StrategyRequest r;
    r.strategy = s;
    r.batch = 16;
    r.budget = budget;
    r.micro_batch = 8;
    StrategyPlan p = plan_strategy(copy, r);
    const StrategyChoice choice = p.choice;
    return std::make_pair(test::run_one_batch(std::move(copy), std::move(p), 16, kClasses), choice);
  };
  const auto [want, kept] = run(Strategy::MicroBatch, std::size_t{1} << 40);
  EXPECT_TRUE(kept.swapped.empty() && kept.recomputed.empty());
  for (Strategy s : {Strategy::Swap, Strategy::Recompute}) {
    SCOPED_TRACE(strategy_name(s));
    // The least budget the strategy fits the micro-batch in, as a budget it does not fit reports it.
    const std::string msg = test::error_of([&] { run(s, 64 << 10); });
    const std::size_t at = msg.find("(--memory-budget ");
    ASSERT_NE(at, std::string::npos) << msg;
    const auto [got, choice] = run(s, std::stoull(msg.substr(at + 17)));
    EXPECT_FALSE(choice.swapped.empty() && choice.recomputed.empty());
    expect_same_bits(got, want);
  }
  }
}

// Swapping and recomputing a fused plan fall back on its In-Place form or the unfused graph where either
// needs less memory (fused steps are coarser; In-Place changes what recomputing can drop): with fusion on,
// no strategy's least budget is above fusion off's (resnet20, 3x32x32, micro-batch 8, BatchNorm groups of 8).
TEST(Fusion, StrategiesNeedNoMoreMemoryFused) {
  auto plan = [](bool fuse, Strategy s, std::size_t budget) {
    TrainConfig c;
    c.model = "resnet20";
    c.micro_batch = 8;
    c.norm.bn.group = 8;
    c.fuse = fuse;
    c.strategy = s;
    c.memory_budget = budget;
    return plan_run(c, {3, 32, 32, kClasses}, 8, Device::CPU);
  };
  auto least = [&](bool fuse, Strategy s) -> std::size_t {
    const std::string msg = test::error_of([&] { plan(fuse, s, 64 << 10); });
    const std::size_t at = msg.find("(--memory-budget ");
    return at == std::string::npos ? 0 : std::stoull(msg.substr(at + 17));
  };
  for (Strategy s : {Strategy::Swap, Strategy::Recompute, Strategy::Auto}) {
    SCOPED_TRACE(strategy_name(s));
    const std::size_t fused = least(true, s), unfused = least(false, s);
    ASSERT_GT(fused, 0u);
    EXPECT_LE(fused, unfused);
    const RunPlan p = plan(true, s, fused);  // the least it names is a budget it meets
    EXPECT_LE(p.strategy.plan.memory.total(), fused);
  }
}

// In-Place memory keeps one tensor per fused normalisation chain where there were two: ResNet-50 at 224x224,
// micro-batch 32, float32 plans an arena of at most 0.75 of the unfused one (measured: 0.64), and
// plan_run takes it where micro-batching alone then fits a budget it did not fit.
TEST(Fusion, InPlaceArenaOfResnet50) {
  auto plan = [](Fusing fusing) {
    return plan_micro_batch(build("resnet50", {}, fusing, 3, 224), 32, OptimizerConfig{});
  };
  const MicroBatchPlan fused = plan(Fusing::Fused), unfused_plan = plan(Fusing::Unfused);
  const std::size_t unfused = unfused_plan.memory.arena, in_place = plan(Fusing::InPlace).memory.arena;
  // Fusing alone keeps the same values: the same peak of live bytes and workspace. Where the planner places
  // them may differ by its usual slack (under 0.5% of the arena; measured 0.05% here).
  EXPECT_EQ(fused.train.plan.lower_bound, unfused_plan.train.plan.lower_bound) << "fusing alone keeps the same values";
  EXPECT_LE(fused.memory.arena, unfused + unfused / 200);
  EXPECT_LE(in_place, unfused * 3 / 4);
  TrainConfig c;
  c.model = "resnet50";
  c.micro_batch = 32;
  c.memory_budget = std::size_t{2} << 30;  // the unfused plan needs 2.85 GiB
  const RunPlan p = plan_run(c, {3, 224, 224, kClasses}, 256, Device::CPU);
  EXPECT_TRUE(p.in_place);
  EXPECT_EQ(p.strategy.plan.memory.arena, in_place);
  EXPECT_NE(p.split.find("In-Place"), std::string::npos) << p.split;
  c.fuse = false;
  c.strategy = Strategy::MicroBatch;
  EXPECT_NE(test::error_of([&] { plan_run(c, {3, 224, 224, kClasses}, 256, Device::CPU); }).find("exceeds --memory-budget"),
            std::string::npos);
}

}  // namespace
}  // namespace crumb
