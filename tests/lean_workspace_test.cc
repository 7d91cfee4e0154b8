// Workspace under pressure: the convolution's weight gradient runs its slices of samples one after another
// in one slice's workspace (Conv2dShape::lean, Node::lean) with the same bits as side by side, and the
// memory strategy takes that variant where a step's workspace sets the peak of a plan over the budget.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/strategy/memory_strategy.h"
#include "engine/train/model_registry.h"
#include "engine/train/scheduler.h"
#include "kernels/conv2d.h"
#include "tests/batch_outcome.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

cpu::Conv2dShape conv(int n, int c_in, int hw, int c_out, int k, int stride, int pad) {
  const int out = (hw + 2 * pad - k) / stride + 1;
  return {n, c_in, hw, hw, c_out, k, k, stride, stride, pad, pad, out, out};
}

TEST(LeanWorkspace, WeightGradientHasTheSameBitsInLessWorkspace) {
  const int saved = omp_get_max_threads();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const cpu::Conv2dShape& s : {
           conv(9, 16, 14, 16, 3, 1, 1),  // direct
           conv(7, 8, 12, 12, 3, 2, 1),   // im2col, strided
           conv(10, 16, 8, 24, 3, 1, 1),  // small maps: blocked samples
           conv(6, 8, 9, 8, 1, 1, 0),     // pointwise
           conv(40, 64, 1, 64, 3, 1, 1),  // small map, 3x3 on 1x1: the live tap's sums of each slice
           conv(41, 32, 2, 48, 3, 1, 1),  // small map, every tap live
       }) {
    SCOPED_TRACE(::testing::Message() << "n=" << s.n << " c_in=" << s.c_in << " " << s.h << "x" << s.w);
    std::vector<float> x(s.in_count()), dy(s.out_count()), start(std::size_t(s.c_out) * s.c_in * s.kh * s.kw + s.c_out);
    for (auto* v : {&x, &dy, &start})
      for (float& e : *v) e = u(rng);
    cpu::Conv2dShape lean = s;
    lean.lean = true;
    EXPECT_LT(cpu::conv2d_backward_weight_workspace(lean), cpu::conv2d_backward_weight_workspace(s));
    auto run = [&](const cpu::Conv2dShape& shape, bool accumulate) {
      // Aligned as the arena aligns a step's workspace: vectorised sums depend on where they start.
      std::vector<float> ws(cpu::conv2d_backward_weight_workspace(shape) + 64, std::numeric_limits<float>::quiet_NaN());
      float* aligned = ws.data() + (64 - reinterpret_cast<std::uintptr_t>(ws.data()) % 256 / sizeof(float)) % 64;
      std::vector<float> out = start;
      const std::size_t dw_len = out.size() - s.c_out;
      cpu::conv2d_backward_weight(out.data(), out.data() + dw_len, dy.data(), x.data(), shape, aligned, accumulate);
      return out;
    };
    for (int threads : {1, 2, 3})
      for (bool accumulate : {false, true}) {
        omp_set_num_threads(threads);
        const std::vector<float> want = run(s, accumulate), got = run(lean, accumulate);
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << threads << " threads, accumulate " << accumulate;

      }
  }
  omp_set_num_threads(saved);
}

// lenet5 at micro-batch 64: the second convolution's weight gradient (3.06 MiB of workspace) sets the
// peak. A budget under the in-memory total but over the plan with lean steps is met by running them lean,
// with nothing swapped or recomputed, and one batch has the in-memory bits.
TEST(LeanWorkspace, TheStrategyRunsLeanStepsWhereWorkspaceSetsThePeak) {
  Graph plain = models::build("lenet5", {1, 28, 28, 10});
  build_backward(plain);
  StrategyRequest r;
  r.batch = 64;
  r.micro_batch = 64;
  r.strategy = Strategy::MicroBatch;
  r.budget = std::size_t{1} << 40;
  Graph reference = plain;
  StrategyPlan want_plan = plan_strategy(reference, r);
  const std::size_t in_memory = want_plan.plan.memory.total();
  r.strategy = Strategy::Auto;
  r.budget = in_memory - (1 << 20);
  Graph g = plain;
  StrategyPlan p = plan_strategy(g, r);
  EXPECT_LE(p.plan.memory.total(), r.budget);
  EXPECT_FALSE(p.choice.lean.empty());
  EXPECT_TRUE(p.choice.swapped.empty() && p.choice.recomputed.empty());
  auto run = [](const Graph& graph, StrategyPlan& plan) { return test::run_one_batch(graph, std::move(plan), 64, 10); };
  const test::BatchOutcome want = run(reference, want_plan), got = run(g, p);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  EXPECT_EQ(0, std::memcmp(got.grads.data(), want.grads.data(), got.grads.size() * sizeof(float)));
  EXPECT_EQ(got.loss_sum, want.loss_sum);
}

}  // namespace
}  // namespace crumb
