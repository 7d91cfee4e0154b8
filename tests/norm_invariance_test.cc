// The promise with normalisation: a batch's gradients and running statistics do not depend on the
// micro-batch size. BatchNorm over groups of G gives the same results at every m that holds whole groups
// (ragged batches included); GroupNorm at every m; and the deferred running statistics equal those of
// BatchNorm over the whole batch (Chan's merge is exact).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/base/error.h"
#include "engine/strategy/memory_report.h"
#include "engine/train/scheduler.h"
#include "engine/ops/norm.h"
#include "engine/train/model_registry.h"
#include "tests/batch_outcome.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

constexpr int kChannels = 3, kSize = 8, kClasses = 5;

struct BatchOutcome : test::BatchOutcome {
  std::vector<float> bn1;  // the first layer's running_mean and running_var
};

Graph resnet20(const models::NormSpec& norm) {
  Graph g = models::build("resnet20", {kChannels, kSize, kSize, kClasses, norm});
  build_backward(g);
  return g;
}

// One training batch of `batch` samples in micro-batches of m, from the same weights every time.
BatchOutcome run_batch(const Graph& g, int m, int batch) {
  BatchOutcome out;
  static_cast<test::BatchOutcome&>(out) = test::run_one_batch(g, m, batch, kClasses, [&](const ParamStore& params) {
    for (ValueId v : g.states())
      if (g.value(v).name.rfind("bn1.running_", 0) == 0) {
        const float* s = static_cast<const float*>(params.state(v));
        out.bn1.insert(out.bn1.end(), s, s + g.value(v).count(1));
      }
  });
  return out;
}

// Float32 sums taken in another order across micro-batches.
constexpr double kTolerance = 1e-5;

void expect_same(const BatchOutcome& got, const BatchOutcome& want) {
  EXPECT_NEAR(got.loss_sum, want.loss_sum, kTolerance * want.loss_sum);
  EXPECT_LE(test::relative_error(got.grads, want.grads), kTolerance) << "parameter gradients";
  EXPECT_LE(test::relative_error(got.state, want.state), kTolerance) << "running statistics";
  EXPECT_EQ(got.tracked, want.tracked) << "num_batches_tracked";
}

TEST(NormInvariance, BatchNormGroupsGiveTheSameBatchAtEveryMicroBatchSize) {
  for (BnStats stats : {BnStats::Deferred, BnStats::PerGroup}) {
    models::NormSpec norm;
    norm.bn.group = 8;
    norm.bn.stats = stats;
    const Graph g = resnet20(norm);
    for (int batch : {40, 44}) {  // 44: a ragged micro-batch and a last group of 4
      SCOPED_TRACE((stats == BnStats::Deferred ? "deferred, batch " : "per-group, batch ") + std::to_string(batch));
      const BatchOutcome whole = run_batch(g, batch, batch);
      EXPECT_EQ(whole.tracked.front(), stats == BnStats::Deferred ? 1 : (batch + 7) / 8);
      for (int m : {8, 16, 24, 40}) {
        SCOPED_TRACE("micro-batch " + std::to_string(m));
        expect_same(run_batch(g, m, batch), whole);
      }
    }
  }
}

TEST(NormInvariance, GroupNormGivesTheSameBatchAtAnyMicroBatchSize) {
  models::NormSpec norm;
  norm.kind = models::NormSpec::Kind::Group;
  const Graph g = resnet20(norm);
  const BatchOutcome whole = run_batch(g, 21, 21);
  for (int m : {1, 4, 7, 20}) {
    SCOPED_TRACE("micro-batch " + std::to_string(m));
    expect_same(run_batch(g, m, 21), whole);
  }
}

// Groups of 8 normalise differently from the whole batch (other gradients, and other inputs to every
// later layer), but the first layer's deferred running statistics, whose input is the same, merge the
// groups' moments into exactly the whole batch's.
TEST(NormInvariance, DeferredStatisticsAreTheWholeBatchStatistics) {
  models::NormSpec grouped, whole;
  grouped.bn.group = 8;
  whole.bn.group = 0;
  const BatchOutcome a = run_batch(resnet20(grouped), 16, 40), b = run_batch(resnet20(whole), 40, 40);
  EXPECT_GT(test::relative_error(a.grads, b.grads), 1e-3) << "groups of 8 should normalise differently";
  ASSERT_EQ(a.bn1.size(), 32u);
  EXPECT_LE(test::relative_error(a.bn1, b.bn1), kTolerance);
  EXPECT_GT(test::relative_error(a.state, b.state), 1e-3) << "later layers see other inputs";
  EXPECT_EQ(a.tracked, b.tracked);
}

TEST(NormInvariance, MicroBatchesMustHoldWholeGroups) {
  models::NormSpec norm;
  norm.bn.group = 8;
  const Graph g = resnet20(norm);
  ParamStore params(g);
  Arena arena;
  Scheduler sched(g, params, arena, 12);
  const std::vector<float> x(40 * kChannels * kSize * kSize, 0.5f);
  const std::vector<int32_t> y(40, 1);
  const std::string msg = test::error_of([&] { sched.train_batch({{"x", x.data()}, {"y", y.data()}}, 40); });
  EXPECT_NE(msg.find("micro-batch 12 is not a multiple of the BatchNorm group of 8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("use 8 or 16"), std::string::npos) << msg;
  const std::string small = test::error_of([&] { check_micro_batch(g, 4, 40); });
  EXPECT_NE(small.find("micro-batch 4 is not a multiple of the BatchNorm group of 8 samples"), std::string::npos);
  EXPECT_NE(small.find("(use 8)"), std::string::npos) << small;
  // A batch that fits in one micro-batch needs nothing of it.
  EXPECT_NO_THROW(sched.train_batch({{"x", x.data()}, {"y", y.data()}}, 12));

  models::NormSpec over_batch;
  over_batch.bn.group = 0;
  const std::string whole = test::error_of([&] { check_micro_batch(resnet20(over_batch), 16, 40); });
  EXPECT_NE(whole.find("--bn-group batch"), std::string::npos) << whole;
  EXPECT_NE(whole.find("--norm gn"), std::string::npos) << whole;
}

TEST(NormInvariance, BudgetSearchPicksWholeGroups) {
  models::NormSpec norm;
  norm.bn.group = 8;
  const Graph g = resnet20(norm);
  const OptimizerConfig sgd;
  const std::size_t at_24 = measure_memory(g, 24, sgd, Device::CPU, 0, 100).total();
  const MicroBatchPlan p = choose_micro_batch(g, 100, at_24 + 1000, sgd);
  EXPECT_EQ(p.micro_batch, 24);
  // Too small for one group: the error names the smallest unit that can run.
  const std::size_t at_8 = measure_memory(g, 8, sgd, Device::CPU, 0, 100).total();
  const std::string msg = test::error_of([&] { choose_micro_batch(g, 100, at_8 - 1, sgd); });
  EXPECT_NE(msg.find("micro-batch 8 (one BatchNorm group"), std::string::npos) << msg;
}

}  // namespace
}  // namespace crumb
