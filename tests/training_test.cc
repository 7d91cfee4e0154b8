// End-to-end training through the scheduler and optimizer: the loss falls, runs are deterministic,
// micro-batched gradients equal full-batch gradients, and a training step performs no heap allocation.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/base/error.h"
#include "engine/graph/rng.h"
#include "engine/optim/optimizer.h"
#include "engine/train/scheduler.h"
#include "engine/train/model_registry.h"
#include "tests/alloc_counter.h"
#include "tests/trained_model.h"

namespace crumb {
namespace {

// Trains `epochs` over the synthetic set; returns the mean loss of each epoch.
std::vector<double> train(TrainedModel& r, int batch, int epochs) {
  const data::Dataset& ds = synthetic_dataset();
  data::Loader loader(ds, batch, {0.5f, 0.25f}, data::LoaderOptions::shuffled(5));
  std::vector<double> losses;
  for (int e = 0; e < epochs; ++e) {
    loader.start_epoch(e);
    data::Batch b;
    double sum = 0;
    while (loader.next(b)) {
      sum += r.sched.train_batch({{"x", b.x}, {"y", b.y}}, b.size).loss_sum;
      r.opt->step();
    }
    losses.push_back(sum / ds.count);
  }
  return losses;
}

// The registered models whose smallest input fits the synthetic 16x16 images. vgg11_bn takes 32x32 at
// least, and its 129M-parameter classifier would make this minutes long on 2 cores; its training steps
// are checked against torchvision's instead (TorchParity.Vgg11Bn*).
std::vector<std::string> trainable_on_synthetic() {
  std::vector<std::string> out;
  for (const std::string& model : models::names())
    if (models::min_image_size(model) <= 16) out.push_back(model);
  return out;
}

// One test per model, so each has the test timeout to itself (ResNet-50 alone takes minutes in the
// sanitizer build) and two run side by side.
class LossFalls : public ::testing::TestWithParam<std::string> {};

TEST_P(LossFalls, InFourEpochs) {
  const std::string& model = GetParam();
  TrainedModel r(model, 32, 1);
  // At lr 0.05 the ImageNet ResNets are unstable on these 16x16 images: ResNet-50's first epoch diverges
  // (mean loss 43 on 4 classes) and ResNet-18's test loss reaches hundreds within 2 epochs, and whether
  // later epochs recover turns on float rounding (the baseline-ISA build and the native one agree to 1e-5
  // for 4 steps, then part). At 0.002 their loss falls every epoch.
  if (model == "resnet50" || model == "resnet18") r.opt = make_optimizer(r.params, sgd_config(0.002f, 0.9f, 1e-4f));
  const std::vector<double> l = train(r, 32, 4);
  EXPECT_LT(l.back(), 0.5 * l.front()) << model << ": " << l.front() << " -> " << l.back();
}

INSTANTIATE_TEST_SUITE_P(Training, LossFalls, ::testing::ValuesIn(trainable_on_synthetic()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(Training, SameSeedSameWeights) {
  TrainedModel a("lenet5", 16, 3), b("lenet5", 16, 3);
  train(a, 16, 1);
  train(b, 16, 1);
  EXPECT_EQ(a.weights(), b.weights());
}

// One batch of 29 samples, m in {1, 3, 7, 29}: accumulated gradients equal the full-batch gradient.
TEST(Training, MicroBatchGradientsEqualFullBatch) {
  const data::Dataset& ds = synthetic_dataset();
  data::Loader loader(ds, 29, {0.5f, 0.25f}, data::LoaderOptions::shuffled(9));
  loader.start_epoch(0);
  data::Batch b;
  ASSERT_TRUE(loader.next(b));
  for (const char* model : {"lenet5", "cnn", "mlp"}) {
    TrainedModel full(model, 29, 4);
    full.sched.train_batch({{"x", b.x}, {"y", b.y}}, b.size);
    const std::vector<float> ref = full.grads();
    float scale = 0;
    for (float v : ref) scale = std::max(scale, std::fabs(v));
    for (int m : {1, 3, 7}) {
      TrainedModel micro(model, m, 4);
      // Garbage in the gradient buffer must be overwritten by the first micro-batch, not added to.
      for (ValueId p : micro.g.params())
        std::fill_n(static_cast<float*>(micro.params.grad(p)), micro.g.value(p).count(1), 123.0f);
      const BatchResult res = micro.sched.train_batch({{"x", b.x}, {"y", b.y}}, b.size);
      EXPECT_EQ(res.micro_batches, (29 + m - 1) / m);
      const std::vector<float> got = micro.grads();
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - ref[i])) / scale);
      EXPECT_LE(worst, 1e-5) << model << " m=" << m;
    }
  }
}

// B = 256 split as m = 32 trains to the same weights as m = 256 (2 epochs, momentum, weight decay).
TEST(Training, MicroBatchedTrainingMatchesFullBatch) {
  for (const char* model : {"lenet5", "cnn"}) {
    TrainedModel full(model, 256, 8), micro(model, 32, 8);
    train(full, 256, 2);
    train(micro, 256, 2);
    const std::vector<float> a = full.weights(), b = micro.weights();
    double worst = 0, scale = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, double(std::fabs(a[i] - b[i])));
      scale = std::max(scale, double(std::fabs(a[i])));
    }
    EXPECT_LE(worst / scale, 1e-5) << model;
    EXPECT_EQ(micro.sched.micro_batch(), 32);
  }
}

// Inputs are bound by the names the model gave them: in any order, each exactly once.
TEST(Training, InputsAreBoundByName) {
  const data::Dataset& ds = synthetic_dataset();
  data::Loader loader(ds, 16, {0.5f, 0.25f}, data::LoaderOptions::in_order(2));
  loader.start_epoch(0);
  data::Batch b;
  ASSERT_TRUE(loader.next(b));
  TrainedModel a("mlp", 16, 1), r("mlp", 16, 1);
  const double in_order = a.sched.train_batch({{"x", b.x}, {"y", b.y}}, b.size).loss_sum;
  EXPECT_EQ(r.sched.train_batch({{"y", b.y}, {"x", b.x}}, b.size).loss_sum, in_order);
  auto error_of = [&](InputBatches inputs) -> std::string {
    try {
      r.sched.train_batch(inputs, b.size);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of({{"x", b.x}}).find("input 'y' was not given"), std::string::npos);
  EXPECT_NE(error_of({{"x", b.x}, {"y", b.y}, {"z", b.x}}).find("no input named 'z'"), std::string::npos);
  EXPECT_NE(error_of({{"x", b.x}, {"x", b.x}}).find("'x' is given twice"), std::string::npos);
  EXPECT_NE(error_of({{"x", nullptr}, {"y", b.y}}).find("'x' has no data"), std::string::npos);
  // A source that says its sample size is held to the model's: float64 images for a float32 model are
  // refused before anything is read.
  data::Loader wide(ds, 16, {0.5f, 0.25f}, data::LoaderOptions::in_order(2).as(DType::F64));
  wide.start_epoch(0);
  ASSERT_TRUE(wide.next(b));
  try {
    r.sched.train_batch(wide, b.size);
    ADD_FAILURE() << "a float32 model trained on float64 images";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 'x' comes in samples of 2048 bytes but the model's takes 1024"),
              std::string::npos) << e.what();
  }
}

// The loader streaming micro-batches of m (set_micro_batch) trains exactly as whole batches taken from it
// and sliced by the scheduler: the same weights bit for bit, augmentation and a short last batch included.
TEST(Training, StreamedMicroBatchesTrainLikeWholeBatches) {
  const data::Dataset& ds = synthetic_dataset();
  for (int m : {29, 8, 3}) {
    TrainedModel whole("lenet5", m, 6), streamed("lenet5", m, 6);
    data::Loader a(ds, 29, {0.5f, 0.25f}, data::LoaderOptions::shuffled(4)),
        b(ds, 29, {0.5f, 0.25f}, data::LoaderOptions::shuffled(4));
    a.set_augment({2, true});
    b.set_augment({2, true});
    b.set_micro_batch(m);
    for (int epoch = 0; epoch < 2; ++epoch) {
      a.start_epoch(epoch);
      b.start_epoch(epoch);
      data::Batch wb, sb;
      while (a.next(wb)) {
        ASSERT_TRUE(b.next(sb));
        const uint64_t key = random_key(1, whole.opt->steps());
        const double lw = whole.sched.train_batch({{"x", wb.x}, {"y", wb.y}}, wb.size, key).loss_sum;
        const BatchResult rs = streamed.sched.train_batch(b, sb.size, key);
        EXPECT_EQ(rs.loss_sum, lw);
        EXPECT_EQ(rs.micro_batches, (sb.size + m - 1) / m);
        whole.opt->step();
        streamed.opt->step();
      }
      const BatchResult ew = whole.sched.evaluate({{"x", wb.x}, {"y", wb.y}}, wb.size);
      b.start_epoch(epoch, a.batches_per_epoch() - 1);
      ASSERT_TRUE(b.next(sb));
      EXPECT_EQ(streamed.sched.evaluate(b, sb.size).loss_sum, ew.loss_sum);
    }
    EXPECT_EQ(streamed.weights(), whole.weights()) << "m " << m;
  }
}

// Streaming from the loader allocates nothing per batch either (its slots are sized at start_epoch).
TEST(Training, StreamedStepDoesNotAllocate) {
  if (!alloc_counter_enabled()) GTEST_SKIP() << "allocation counting is unavailable under sanitizers";
  TrainedModel r("lenet5", 20, 1);
  data::Loader loader(synthetic_dataset(), 48, {0.5f, 0.25f}, data::LoaderOptions::shuffled(2));
  loader.set_micro_batch(20);
  loader.set_augment({2, true});
  loader.start_epoch(0);
  data::Batch b;
  ASSERT_TRUE(loader.next(b));
  r.sched.train_batch(loader, b.size);  // warm-up: lazy pointer resolution, thread pools
  r.opt->step();
  const AllocCount before = alloc_count();
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(loader.next(b));
    r.sched.train_batch(loader, b.size);
    r.opt->step();
  }
  const AllocCount after = alloc_count();
  EXPECT_EQ(after.news, before.news) << "operator new called during streamed training steps";
  EXPECT_EQ(after.mallocs, before.mallocs) << "malloc called during streamed training steps";
}

TEST(Training, StepDoesNotAllocate) {
  if (!alloc_counter_enabled()) GTEST_SKIP() << "allocation counting is unavailable under sanitizers";
  const data::Dataset& ds = synthetic_dataset();
  data::Loader loader(ds, 48, {0.5f, 0.25f}, data::LoaderOptions::shuffled(2));
  for (const char* model : {"lenet5", "cnn", "mlp"}) {
    TrainedModel r(model, 20, 1);  // 48 = 20 + 20 + 8: a ragged last micro-batch too
    loader.start_epoch(0);
    data::Batch b;
    ASSERT_TRUE(loader.next(b));
    r.sched.train_batch({{"x", b.x}, {"y", b.y}}, b.size);  // warm-up: lazy pointer resolution, thread pools
    r.opt->step();
    const AllocCount before = alloc_count();
    for (int i = 0; i < 3; ++i) {
      r.sched.train_batch({{"x", b.x}, {"y", b.y}}, b.size);
      r.opt->step();
      r.sched.evaluate({{"x", b.x}, {"y", b.y}}, b.size);
    }
    const AllocCount after = alloc_count();
    EXPECT_EQ(after.news, before.news) << model << ": operator new called during training steps";
    EXPECT_EQ(after.mallocs, before.mallocs) << model << ": malloc called during training steps";
  }
}

}  // namespace
}  // namespace crumb
