// Data every client brings is checked by the engine (engine/data/data_checks.h), so train, the Python module
// and C++ programs refuse it alike: one class, labels outside the classes, a normalisation that is not
// finite; and images that are not finite are named as the cause when the loss or a parameter stops being
// finite, instead of blaming the learning rate.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/data/data_checks.h"
#include "engine/train/trainer.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

constexpr int kSide = 8, kClasses = 3;

// What the Python module builds from numpy arrays: float32 images read in place, labels in memory.
struct Arrays {
  std::vector<float> train, test;
  std::shared_ptr<data::DataSplit> split = std::make_shared<data::DataSplit>();
};

data::Dataset dataset(const std::vector<float>& images, int count, int classes) {
  data::Dataset d;
  d.count = count;
  d.channels = 1;
  d.height = d.width = kSide;
  d.num_classes = classes;
  for (int i = 0; i < count; ++i) d.labels.push_back(i % std::max(classes, 1));
  d.mapped = {images.data(), data::PixelType::F32, nullptr};
  return d;
}

// 64 training and 16 test images of values in [-1, 1], kClasses classes.
std::unique_ptr<Arrays> arrays(int classes = kClasses) {
  auto a = std::make_unique<Arrays>();
  for (int i = 0; i < 64 * kSide * kSide; ++i) a->train.push_back(std::sin(0.37f * i));
  for (int i = 0; i < 16 * kSide * kSide; ++i) a->test.push_back(std::cos(0.11f * i));
  a->split->train = dataset(a->train, 64, classes);
  a->split->test = dataset(a->test, 16, classes);
  a->split->norm = data::Normalization(0.f, 1.f);
  a->split->source = "numpy arrays";
  return a;
}

TrainConfig config() {
  TrainConfig c;
  c.model = "mlp";
  c.batch = 16;
  c.epochs = 1;
  c.optimizer.lr = 0.01;
  c.threads = 1;
  c.device = Device::CPU;
  return c;
}

std::string fit_error(const Arrays& a, TrainConfig c = config()) {
  return test::error_of([&] {
    Trainer t(c, a.split);
    t.fit();
  });
}

TEST(DataChecks, OneClassIsRefusedForEveryClient) {
  const auto a = arrays(1);  // every label 0: what the Python module makes of all-zero labels
  const std::string e = fit_error(*a);
  EXPECT_NE(e.find("has 1 class (every label is 0)"), std::string::npos) << e;
  EXPECT_NE(e.find("at least 2 classes"), std::string::npos) << e;
  EXPECT_NE(e.find("numpy arrays"), std::string::npos) << e;
}

TEST(DataChecks, LabelsOutsideTheClassesAreRefused) {
  auto a = arrays();
  a->split->train.labels[9] = kClasses;
  std::string e = fit_error(*a);
  EXPECT_NE(e.find("label 3 at index 9 is outside [0, 3)"), std::string::npos) << e;
  a->split->train.labels[9] = 0;
  a->split->test.labels[4] = -1;
  e = fit_error(*a);
  EXPECT_NE(e.find("the test data of numpy arrays: label -1 at index 4"), std::string::npos) << e;
}

TEST(DataChecks, NormalisationMustBeFiniteWithStdAboveZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    data::Normalization norm;
    const char* what;
  };
  const Case cases[] = {{{nan, 1.f}, "mean[0] is nan"},  {{0.f, 0.f}, "std[0] is 0"},  {{0.f, nan}, "std[0] is nan"},
                        {{0.f, inf}, "std[0] is inf"},   {{inf, 1.f}, "mean[0] is inf"},
                        {{{0.f, 0.f}, {1.f, 1.f}}, "2 means and 2 stds for images of 1 channels"}};
  for (const Case& k : cases) {
    auto a = arrays();
    a->split->norm = k.norm;
    const std::string e = fit_error(*a);
    EXPECT_NE(e.find(k.what), std::string::npos) << e;
    EXPECT_EQ(e.find("diverged"), std::string::npos) << e;
  }
}

TEST(DataChecks, NonFiniteTrainingImagesAreNamedNotBlamedOnTheLearningRate) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
    auto a = arrays();
    a->split->train.images = "x.npy";
    a->train[37 * kSide * kSide + 2 * kSide + 5] = bad;  // sample 37, row 2, column 5
    const std::string e = fit_error(*a);
    EXPECT_NE(e.find("the training images of numpy arrays: sample 37 (image 37 of x.npy) holds " +
                     std::string(std::isnan(bad) ? "nan" : "-inf") + " at element 21 (channel 0, row 2, column 5)"),
              std::string::npos)
        << e;
    EXPECT_EQ(e.find("diverged"), std::string::npos) << e;
    EXPECT_EQ(e.find("--lr"), std::string::npos) << e;
  }
  // Finite, but not once normalised: 3e38 / 0.5 overflows float32.
  auto a = arrays();
  a->train[5 * kSide * kSide] = 3e38f;
  a->split->norm = data::Normalization(0.f, 0.5f);
  const std::string e = fit_error(*a);
  EXPECT_NE(e.find("sample 5 holds 3e+38, which the normalisation makes inf"), std::string::npos) << e;
}

TEST(DataChecks, NonFiniteTestImagesAreNamed) {
  auto a = arrays();
  a->test[3 * kSide * kSide + 7] = std::numeric_limits<float>::quiet_NaN();
  a->split->test.images = "x.npy";
  a->split->test.first = 64;  // the held-out tail of x.npy
  const std::string e = fit_error(*a);
  EXPECT_NE(e.find("the evaluation images of numpy arrays: sample 3 (image 67 of x.npy) holds nan"), std::string::npos)
      << e;
}

TEST(DataChecks, RealDivergenceStillBlamesTheLearningRate) {
  const auto a = arrays();
  TrainConfig c = config();
  c.optimizer.lr = 1e30;
  const std::string e = fit_error(*a, c);
  EXPECT_NE(e.find("training diverged"), std::string::npos) << e;
  EXPECT_NE(e.find("lower --lr"), std::string::npos) << e;
}

TEST(DataChecks, FindNonFiniteScansInOrder) {
  auto a = arrays();
  EXPECT_FALSE(data::find_nonfinite(a->split->train, a->split->norm));
  a->train[40 * kSide * kSide + 1] = std::numeric_limits<float>::quiet_NaN();
  a->train[12 * kSide * kSide + 63] = std::numeric_limits<float>::infinity();
  const std::optional<data::NonFinite> bad = data::find_nonfinite(a->split->train, a->split->norm);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->sample, 12);
  EXPECT_EQ(bad->element, 63);
  // uint8 images are finite whatever their bytes, under a valid normalisation.
  data::Dataset u8 = data::make_synthetic(10, 1, 4, 4, 2, 1);
  EXPECT_FALSE(data::find_nonfinite(u8, data::Normalization(0.5f, 0.25f)));
}

}  // namespace
}  // namespace crumb
