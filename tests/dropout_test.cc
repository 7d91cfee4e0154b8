// Dropout's promises beyond the op cases (tests/ops/dropout_cases.cc, which checks its gradients with a fixed
// mask): it keeps 1 - p of the elements and scales them by 1 / (1 - p); its mask depends on a sample's
// index in the batch, not on the micro-batch that holds it, so a batch's gradients are the same at every
// micro-batch size (with BatchNorm groups too); another step's key draws another mask; evaluation is the
// identity.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/graph/rng.h"
#include "engine/train/trainer.h"
#include "kernels/dropout.h"
#include "tests/batch_outcome.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

std::vector<float> dropped(const std::vector<float>& x, int n, double p, RandomKey key, uint64_t layer = 1) {
  const DropoutAttrs a{p, layer};
  std::vector<float> y(x.size());
  cpu::dropout<float>(y.data(), x.data(), n, x.size() / n, key, layer, a.threshold(), static_cast<float>(a.scale()),
                      false);
  return y;
}

TEST(Dropout, KeepsOneMinusPOfTheElementsAndScalesThemByItsInverse) {
  constexpr int kSamples = 50, kPerSample = 2000;
  const std::vector<float> ones(kSamples * kPerSample, 1.0f);
  for (double p : {0.1, 0.5, 0.9}) {
    SCOPED_TRACE("p = " + std::to_string(p));
    const std::vector<float> y = dropped(ones, kSamples, p, {random_key(0, 3), 0});
    const float scale = static_cast<float>(1 / (1 - p));
    std::size_t kept = 0;
    for (float v : y) {
      if (v != 0) {
        ASSERT_EQ(v, scale);
        ++kept;
      }
    }
    // 100,000 draws: the standard deviation of the rate is at most 0.0016.
    EXPECT_NEAR(static_cast<double>(kept) / y.size(), 1 - p, 0.008);
  }
}

TEST(Dropout, MaskIsAFunctionOfTheSampleIndexInTheBatch) {
  constexpr int kSamples = 8, kPerSample = 64;
  const std::vector<float> x = test::random_floats(kSamples * kPerSample, 1);
  const uint64_t key = random_key(7, 0);
  const std::vector<float> whole = dropped(x, kSamples, 0.5, {key, 0});
  // Samples 0-2 and 3-7 as two micro-batches.
  std::vector<float> head(x.begin(), x.begin() + 3 * kPerSample), tail(x.begin() + 3 * kPerSample, x.end());
  std::vector<float> split = dropped(head, 3, 0.5, {key, 0});
  const std::vector<float> rest = dropped(tail, 5, 0.5, {key, 3});
  split.insert(split.end(), rest.begin(), rest.end());
  EXPECT_EQ(split, whole);
  EXPECT_NE(dropped(x, kSamples, 0.5, {random_key(7, 1), 0}), whole) << "the next step's key";
  EXPECT_NE(dropped(x, kSamples, 0.5, {key, 0}, 2), whole) << "another layer";
  EXPECT_NE(dropped(tail, 5, 0.5, {key, 0}), std::vector<float>(whole.begin() + 3 * kPerSample, whole.end()))
      << "the same samples at another index";
}

constexpr int kChannels = 3, kSize = 8, kClasses = 5, kBatch = 12;

// A small VGG: conv-BN-ReLU-pool twice, adaptive pool, and a classifier with two dropouts.
Graph small_vgg(double p) {
  Graph g;
  ValueId h = g.input("x", {kChannels, kSize, kSize});
  const ValueId y = g.input("y", {}, DType::I32);
  BatchNormAttrs bn;
  bn.group = 2;
  for (int i = 0; i < 2; ++i) {
    const std::string l = "features." + std::to_string(i);
    h = nn::relu(g,
                 nn::batch_norm2d(g, nn::conv2d(g, h, 4 * (i + 1), 3, l + ".conv", nn::ConvOptions().with_pad(1)),
                                  l + ".bn", bn),
                 l + ".relu");
    h = nn::max_pool2d(g, h, 2, 2, l + ".pool");
  }
  h = nn::flatten(g, nn::adaptive_avg_pool2d(g, h, 3, 3, "avgpool"), "flatten");
  h = nn::dropout(g, nn::relu(g, nn::linear(g, h, 24, "classifier.0"), "classifier.1"), p, "classifier.2");
  h = nn::dropout(g, nn::relu(g, nn::linear(g, h, 16, "classifier.3"), "classifier.4"), p, "classifier.5");
  nn::softmax_cross_entropy(g, nn::linear(g, h, kClasses, "classifier.6"), y, "loss");
  build_backward(g);
  return g;
}

// A Trainer of g on kBatch random samples, in micro-batches of m, from weights initialised with seed 3
// whatever the run's seed: `seed` then only chooses the masks, as each step's dropout key is
// random_key(seed, step) (engine/graph/rng.h).
struct DropoutRun {
  DropoutRun(const Graph& g, int m, uint64_t seed) : t(config(m, seed), g, test::random_batch(g, kBatch, kClasses)) {
    t.set_initial_state([](ParamStore& p) { p.init(3); });
  }
  static TrainConfig config(int m, uint64_t seed) {
    TrainConfig c;
    c.model = "small vgg";
    c.device = Device::CPU;
    c.batch = kBatch;
    c.micro_batch = m;
    c.seed = seed;
    return c;
  }
  // The first step's loss and gradients.
  test::BatchOutcome train_batch() {
    test::BatchOutcome out;
    BatchHooks hooks;
    hooks.before_step = [&out](Trainer& tr, const BatchResult& r) {
      out = test::outcome_of(tr.graph(), tr.params(), r.loss_sum, tr.scheduler().train_executor().plan());
    };
    t.set_batch_hooks(hooks);
    t.prepare();
    t.start_epoch(0);
    StepInfo step;
    EXPECT_TRUE(t.train_batch(step));
    return out;
  }
  Trainer t;
};

TEST(Dropout, GradientsDoNotDependOnTheMicroBatchSize) {
  const Graph g = small_vgg(0.5);
  const test::BatchOutcome whole = DropoutRun(g, kBatch, 11).train_batch();
  for (int m : {2, 4, 8, 10}) {  // 8 and 10: a ragged last micro-batch
    SCOPED_TRACE("micro-batch " + std::to_string(m));
    const test::BatchOutcome part = DropoutRun(g, m, 11).train_batch();
    EXPECT_NEAR(part.loss_sum, whole.loss_sum, 1e-5 * whole.loss_sum);
    // Float32 sums in another order across micro-batches, as in NormInvariance.
    EXPECT_LE(test::relative_error(part.grads, whole.grads), 1e-5);
  }
  // The masks matter: another key, or no dropout, gives other gradients.
  EXPECT_GT(test::relative_error(DropoutRun(g, kBatch, 12).train_batch().grads, whole.grads), 1e-2);
  EXPECT_GT(test::relative_error(DropoutRun(small_vgg(0.0), kBatch, 11).train_batch().grads, whole.grads), 1e-2);
}

TEST(Dropout, IsTheIdentityInEvaluation) {
  const Graph with = small_vgg(0.5), without = small_vgg(0.0);
  double loss[2];
  for (int i = 0; i < 2; ++i) {
    DropoutRun run(i == 0 ? with : without, kBatch, 11);
    loss[i] = run.t.evaluate(run.t.data().train).loss;
  }
  EXPECT_EQ(loss[0], loss[1]);
}

}  // namespace
}  // namespace crumb
