// The Trainer on data brought by its caller (what the Python module does with numpy arrays): per-channel
// statistics, training without test data, evaluation on and predictions for any samples, and continuing
// a run on new data.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/data/statistics.h"
#include "engine/train/trainer.h"
#include "tests/small_run.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

using test::small_run;
using test::synthetic_data;

class EpochLog : public Callback {
 public:
  void on_epoch_end(Trainer&, const EpochInfo& e) override { epochs.push_back(e); }
  std::vector<EpochInfo> epochs;
};

TEST(ChannelStatistics, MatchesTheDefinitionPerChannel) {
  data::Dataset u8 = data::make_synthetic(7, 3, 5, 4, 3, 11);
  const data::Normalization n = data::channel_statistics(u8);
  ASSERT_EQ(n.mean.size(), 3u);
  for (int c = 0; c < 3; ++c) {
    double sum = 0, sq = 0;
    int count = 0;
    for (int i = 0; i < u8.count; ++i)
      for (int p = 0; p < 20; ++p) {
        const double v = u8.pixels[(i * 3 + c) * 20 + p] / 255.0;
        sum += v;
        sq += v * v;
        ++count;
      }
    const double mean = sum / count;
    EXPECT_NEAR(n.mean[c], mean, 1e-6);
    EXPECT_NEAR(n.std[c], std::sqrt(sq / count - mean * mean), 1e-6);
  }
  // float32 samples are taken as they are; a constant channel is not divided by zero.
  std::vector<float> values = {1e4f + 1, 1e4f + 3, 5, 5};  // two samples of two 1x1 channels
  data::Dataset f;
  f.count = 2;
  f.channels = 2;
  f.height = f.width = 1;
  f.labels = {0, 1};
  f.mapped = {values.data(), data::PixelType::F32, nullptr};
  // Sample 0 = (1e4+1, 1e4+3), sample 1 = (5, 5): channel 0 holds 1e4+1 and 5, channel 1 holds 1e4+3 and 5.
  const data::Normalization g = data::channel_statistics(f);
  EXPECT_NEAR(g.mean[0], (1e4 + 1 + 5) / 2, 1e-2);
  EXPECT_NEAR(g.std[0], (1e4 + 1 - 5) / 2, 1e-2);
  values = {5, 7, 5, 9};
  EXPECT_EQ(data::channel_statistics(f).std[0], 1.f);  // channel 0: 5 and 5
  values[0] = NAN;
  EXPECT_THROW(data::channel_statistics(f), Error);
  f.count = 0;
  EXPECT_THROW(data::channel_statistics(f), Error);
}

TEST(TrainerData, PredictionsGiveTheEvaluationsLossAndAccuracy) {
  TrainConfig c = small_run();
  c.epochs = 1;
  auto data = synthetic_data(c);
  Trainer t(c, data);
  t.fit();
  const data::Dataset& test = data->test;
  const Evaluation e = t.evaluate(test);
  const Evaluation own = t.evaluate();
  EXPECT_EQ(e.samples, test.count);
  EXPECT_DOUBLE_EQ(e.loss, own.loss);
  EXPECT_DOUBLE_EQ(e.accuracy, own.accuracy);

  const int k = t.classes();
  std::vector<float> logits(static_cast<std::size_t>(test.count) * k);
  t.predict(test, logits.data());
  double loss = 0;
  int correct = 0;
  for (int i = 0; i < test.count; ++i) {
    const float* z = &logits[static_cast<std::size_t>(i) * k];
    double top = z[0], sum = 0;
    int best = 0;
    for (int j = 1; j < k; ++j)
      if (z[j] > top) top = z[best = j];
    for (int j = 0; j < k; ++j) sum += std::exp(z[j] - top);
    loss += top + std::log(sum) - z[test.labels[i]];
    correct += best == test.labels[i];
  }
  EXPECT_NEAR(loss / test.count, e.loss, 1e-5 * std::max(1.0, e.loss));
  EXPECT_DOUBLE_EQ(static_cast<double>(correct) / test.count, e.accuracy);

  // Another micro-batch size gives the same outputs.
  TrainConfig small = c;
  small.micro_batch = 3;
  small.epochs = 0;
  Trainer u(small, data);
  u.prepare();
  std::memcpy(u.params().data_block(), t.params().data_block(), t.params().bytes());
  u.params().to_device();
  std::vector<float> again(logits.size());
  u.predict(test, again.data());
  EXPECT_LT(test::norm_error(again, logits), 1e-6);
}

TEST(TrainerData, TrainsWithoutTestDataAndRejectsOtherShapes) {
  TrainConfig c = small_run();
  auto full = synthetic_data(c);
  auto train_only = std::make_shared<data::DataSplit>(*full);
  train_only->test = {};
  Trainer t(c, train_only);
  EpochLog log;
  const FitResult r = t.fit({&log});
  ASSERT_EQ(log.epochs.size(), 2u);
  EXPECT_EQ(log.epochs[1].test.samples, 0);
  EXPECT_EQ(r.test.samples, 0);
  EXPECT_GT(log.epochs[1].train_accuracy, 0.0);
  EXPECT_THROW(t.evaluate(), Error);
  data::Dataset other = data::make_synthetic(4, 3, 12, 12, 4, 1);
  std::vector<float> out(16);
  EXPECT_THROW(t.predict(other, out.data()), Error);
  other = data::make_synthetic(4, 1, 12, 12, 5, 1);
  EXPECT_THROW(t.evaluate(other), Error);
}

TEST(TrainerData, TrainingMoreEpochsContinuesTheRun) {
  // Constant learning rate: one epoch, then one more, is two epochs.
  TrainConfig c = small_run();
  c.optimizer.schedule = LrSchedule();
  auto data = synthetic_data(c);
  Trainer whole(c, data);
  whole.fit();
  c.epochs = 1;
  Trainer parts(c, data);
  parts.fit();
  parts.train_more(data, 1);
  EpochLog log;
  parts.fit({&log});
  ASSERT_EQ(log.epochs.size(), 1u);
  EXPECT_EQ(log.epochs[0].epoch, 1);
  EXPECT_EQ(parts.optimizer().steps(), whole.optimizer().steps());
  EXPECT_EQ(0, std::memcmp(parts.params().data_block(), whole.params().data_block(), whole.params().bytes()));
  EXPECT_THROW(parts.train_more(data, 0), Error);
  auto other = std::make_shared<data::DataSplit>(*data);
  other->train = data::make_synthetic(10, 3, 12, 12, 4, 1);
  EXPECT_THROW(parts.train_more(other, 1), Error);
}

}  // namespace
}  // namespace crumb
