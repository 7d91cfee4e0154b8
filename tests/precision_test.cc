// Mixed precision end to end on the CPU: micro-batching stays exact in bf16 (weight gradients accumulate in
// float32), the 16-bit weight copies follow the masters, and fp16's loss scale skips exactly the steps
// whose gradient overflowed, leaving everything as it was, and resumes exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/base/error.h"
#include "engine/graph/autograd.h"
#include "engine/optim/loss_scaler.h"
#include "engine/train/model_registry.h"
#include "engine/train/trainer.h"
#include "kernels/half.h"
#include "tests/batch_outcome.h"
#include "tests/small_run.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

// ---- micro-batch invariance in bf16

constexpr int kClasses = 5;

Graph resnet20(DType dtype) {
  models::NormSpec norm;
  norm.bn.group = 8;
  Graph g = models::build("resnet20", {3, 8, 8, kClasses, norm}, dtype);
  build_backward(g);
  return g;
}

// The largest relative difference of the batch's gradients between micro-batches of m and the whole batch
// of 40, over m in {8, 16}.
double microbatch_spread(const Graph& g) {
  const test::BatchOutcome whole = test::run_one_batch(g, 40, 40, kClasses);
  double worst = 0;
  for (int m : {8, 16}) {
    const test::BatchOutcome part = test::run_one_batch(g, m, 40, kClasses);
    EXPECT_NEAR(part.loss_sum, whole.loss_sum, 1e-5 * whole.loss_sum) << "micro-batch " << m;
    worst = std::max(worst, test::relative_error(part.grads, whole.grads));
  }
  return worst;
}

// The micro-batch size changes only the order of float32 sums: the weight gradients are float32 and are
// never rounded to 16 bits between micro-batches, and BatchNorm groups of 8 see the same samples at every
// m. Measured here: float32 1.1e-6, bf16 1.7e-7 (the convolutions' weight gradients sum their slices of
// samples in another order at another m, engine/device/widen.h), far below bf16's rounding of 2^-8 =
// 3.9e-3. The bound allows float32 reordering.
TEST(Precision, Bf16MicroBatchingIsExactToFloat32Reordering) {
  const double f32 = microbatch_spread(resnet20(DType::F32));
  const double bf16 = microbatch_spread(resnet20(DType::BF16));
  std::printf("micro-batch spread of resnet20's gradients, m in {8, 16} against 40: float32 %.3g, bf16 %.3g\n",
              f32, bf16);
  EXPECT_LE(f32, 1e-5);
  EXPECT_LE(bf16, 1e-5);
}

// Every op of every registered model has 16-bit CPU rows, so no CPU step holds float32 copies of its
// whole operands (engine/device/widen.h; the budget counts them: docs/precision.md).
TEST(Precision, EveryModelOpHasSixteenBitCpuRows) {
  ASSERT_GE(models::names().size(), 5u);
  for (const std::string& name : models::names()) {
    const int size = std::max(32, models::min_image_size(name));
    Graph g = models::build(name, {3, size, size, 10}, DType::BF16);
    build_backward(g);
    for (NodeId id = 0; id < g.num_nodes(); ++id) {
      const Node& n = g.node(id);
      if (n.def->view) continue;
      for (DType dtype : {DType::BF16, DType::F16})
        EXPECT_NE(impl_table().find(*n.def, Device::CPU, dtype), nullptr)
            << name << ": " << n.name << " (" << n.def->name << ") " << dtype_name(dtype);
    }
  }
}

// The 16-bit graphs really compute in 16 bits, and their error follows their rounding: fp16 keeps 3 more
// significand bits than bf16 (and these values are far from its range limits), so its gradients land
// closer to float32's. Measured on the mlp: normwise bf16 5.0e-2, fp16 4.9e-4; the gradient of 40 random
// samples with random labels is a sum that mostly cancels, which amplifies the roundoff (and in deep
// ReLU/BatchNorm stacks an input within rounding of 0 switches a ReLU for one sample: resnet20 here
// measures bf16 0.32, fp16 0.11).
TEST(Precision, SixteenBitGradientsDifferFromFloat32ByTheirRounding) {
  auto run = [](DType d) {
    Graph g = models::build("mlp", {3, 8, 8, kClasses}, d);
    build_backward(g);
    return test::run_one_batch(g, 40, 40, kClasses);
  };
  const test::BatchOutcome f32 = run(DType::F32), bf16 = run(DType::BF16), f16 = run(DType::F16);
  const double e_bf16 = test::norm_error(bf16.grads, f32.grads), e_f16 = test::norm_error(f16.grads, f32.grads);
  std::printf("mlp gradients against float32, normwise: bf16 %.3g, fp16 %.3g\n", e_bf16, e_f16);
  EXPECT_GT(e_f16, 1e-5);
  EXPECT_GT(e_bf16, 1e-3);
  EXPECT_LT(e_bf16, 0.2);
  EXPECT_GT(e_bf16 / e_f16, 4.0);
  EXPECT_NEAR(bf16.loss_sum, f32.loss_sum, 1e-3 * f32.loss_sum);
  EXPECT_NEAR(f16.loss_sum, f32.loss_sum, 2e-4 * f32.loss_sum);
}

// ---- the 16-bit weight copies

TEST(Precision, WeightCopiesFollowTheMasters) {
  const Graph g = resnet20(DType::BF16);
  const ValueId conv = g.find_value("conv1.weight"), bn = g.find_value("bn1.weight");
  ASSERT_GE(conv, 0);
  ASSERT_GE(bn, 0);
  EXPECT_EQ(g.value(conv).dtype, DType::BF16);  // what the convolution reads
  EXPECT_EQ(g.value(bn).dtype, DType::F32);     // normalisation parameters stay float32
  EXPECT_EQ(g.value(g.value(conv).grad).dtype, DType::F32);
  TrainConfig cfg;
  cfg.model = "resnet20 in bf16";
  cfg.batch = cfg.micro_batch = 8;
  cfg.seed = 3;
  Trainer t(cfg, g, test::random_batch(g, 8, kClasses));
  t.prepare();
  const ParamStore& params = t.params();
  EXPECT_EQ(params.dtype(), DType::F32);
  const float* master = static_cast<const float*>(params.data(conv));
  const bf16* copy = static_cast<const bf16*>(params.device_copy(conv));
  for (int64_t i = 0; i < g.value(conv).count(1); ++i) ASSERT_EQ(copy[i].bits, to_bf16(master[i]).bits) << i;

  // One optimizer step writes the copies in its pass.
  const std::vector<float> before(master, master + g.value(conv).count(1));
  t.start_epoch(0);
  StepInfo step;
  ASSERT_TRUE(t.train_batch(step));
  EXPECT_NE(std::vector<float>(master, master + g.value(conv).count(1)), before) << "the step changed no weight";
  for (int64_t i = 0; i < g.value(conv).count(1); ++i) ASSERT_EQ(copy[i].bits, to_bf16(master[i]).bits) << i;
}

// ---- fp16's loss scale

TEST(LossScaler, HalvesOnOverflowAndDoublesAfterCleanSteps) {
  LossScaleConfig c;
  c.init = 1024;
  c.growth_interval = 3;
  LossScaler s(c, true);
  EXPECT_FALSE(s.update(5));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_TRUE(s.update(0));
  EXPECT_TRUE(s.update(0));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_TRUE(s.update(0));
  EXPECT_EQ(s.scale(), 1024);  // three clean steps in a row
  EXPECT_TRUE(s.update(0));
  EXPECT_FALSE(s.update(1));  // an overflow restarts the count
  EXPECT_TRUE(s.update(0));
  EXPECT_TRUE(s.update(0));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.skipped(), 2);

  LossScaler off(c, false);
  EXPECT_EQ(off.scale(), 1);
  EXPECT_TRUE(off.update(7));  // nothing is skipped without a scale

  c.init = 2;
  LossScaler low(c, true);
  EXPECT_FALSE(low.update(1));
  EXPECT_EQ(low.scale(), 1);
  EXPECT_NE(test::error_of([&] { low.update(1); }).find("even at loss scale 1"), std::string::npos);

  for (double bad : {0.0, 3.0, 0.5, 1e300}) {
    c.init = bad;
    EXPECT_NE(test::error_of([&] { LossScaler(c, true); }).find("power of two"), std::string::npos) << bad;
  }
}

using test::synthetic_data;

// The small run (tests/small_run.h) in fp16, without augmentation, with a cosine schedule.
TrainConfig fp16_run() {
  TrainConfig c = test::small_run();
  c.augment = false;
  c.optimizer.schedule = LrSchedule();  // the step schedule's size and factor would not apply (validate)
  c.optimizer.schedule.kind = LrSchedule::Kind::Cosine;
  c.precision = Precision::FP16;
  return c;
}

std::vector<char> bytes_of(const void* p, std::size_t n) {
  const char* c = static_cast<const char*>(p);
  return {c, c + n};
}

// A scale far too large: every step's gradient overflows fp16, so every step is skipped and halves the
// scale; the weights, the optimizer's state and step count and the schedule stay as they started.
TEST(LossScaler, OverflowingStepsLeaveEverythingUntouched) {
  TrainConfig c = fp16_run();
  c.loss_scale.init = 0x1p60;
  c.epochs = 1;
  Trainer t(c, synthetic_data(c));
  t.prepare();
  const std::vector<char> before = bytes_of(t.params().data_block(), t.params().bytes());
  const double lr0 = t.optimizer().lr(0);
  const FitResult r = t.fit();
  EXPECT_EQ(t.optimizer().steps(), 0);
  EXPECT_EQ(t.loss_scaler().skipped(), 6);  // 90 samples in batches of 16
  EXPECT_EQ(t.loss_scaler().scale(), 0x1p54);
  EXPECT_EQ(bytes_of(t.params().data_block(), t.params().bytes()), before);
  for (const StateBlock& s : t.optimizer().state())
    for (std::size_t i = 0; i < t.params().count(); ++i) ASSERT_EQ(s.host()[i], 0.0f) << s.name;
  EXPECT_EQ(t.optimizer().lr(t.optimizer().steps()), lr0);
  EXPECT_EQ(r.steps, 0);
}

// A scale that overflows for the first steps only: those are skipped, then the run trains; stopped in the
// middle and resumed, it ends with the bytes of an uninterrupted run (the scale, its clean-step count
// and the skipped steps are in the checkpoint).
TEST(LossScaler, Fp16TrainsAndResumesExactly) {
  TrainConfig c = fp16_run();
  c.loss_scale.init = 0x1p22;  // dlogits * 2^22 / 16 overflows fp16's 65504
  c.loss_scale.growth_interval = 4;
  const auto data = synthetic_data(c);
  Trainer whole(c, data);
  const FitResult r = whole.fit();
  const long long skipped = whole.loss_scaler().skipped();
  EXPECT_GE(skipped, 1);
  EXPECT_LT(skipped, 8);
  EXPECT_EQ(r.steps + skipped, 12);
  EXPECT_TRUE(std::isfinite(r.last_loss));

  const std::string path =
      (std::filesystem::temp_directory_path() / ("crumb_precision_" + std::to_string(getpid()) + ".safetensors"))
          .string();
  TrainConfig stopping = c;
  stopping.save = path;
  stopping.save_every = 1;
  struct StopAt : Callback {
    void on_step(Trainer& t, const StepInfo& s) override {
      if (s.step == 5) t.request_stop();
    }
  } stop;
  Trainer stopped(stopping, data);
  ASSERT_TRUE(stopped.fit({&stop}).stopped);
  TrainConfig rest = c;
  rest.resume = path;
  Trainer resumed(rest, data);
  resumed.fit();
  EXPECT_EQ(resumed.loss_scaler().skipped(), skipped);
  EXPECT_EQ(resumed.loss_scaler().scale(), whole.loss_scaler().scale());
  EXPECT_EQ(bytes_of(resumed.params().data_block(), resumed.params().bytes()),
            bytes_of(whole.params().data_block(), whole.params().bytes()));
  std::filesystem::remove(path);
  std::filesystem::remove(optimizer_path(path));
}

// Checkpoints hold float32 master weights whatever the precision: a bf16 run loads an fp32 run's.
TEST(Precision, AnyPrecisionLoadsAnother) {
  TrainConfig c = fp16_run();
  c.precision = Precision::FP32;
  c.optimizer.schedule.kind = LrSchedule::Kind::Constant;  // an evaluation (epochs 0) has no horizon
  c.epochs = 1;
  const std::string path =
      (std::filesystem::temp_directory_path() / ("crumb_precision_load_" + std::to_string(getpid()) + ".safetensors"))
          .string();
  c.save = path;
  const auto data = synthetic_data(c);
  Trainer f32(c, data);
  f32.fit();
  TrainConfig l = c;
  l.save.clear();
  l.load = path;
  l.epochs = 0;
  l.precision = Precision::BF16;
  Trainer loaded(l, data);
  loaded.prepare();
  {
    const float* a = static_cast<const float*>(loaded.params().data_block());
    const float* b = static_cast<const float*>(f32.params().data_block());
    for (std::size_t i = 0; i < f32.params().count(); ++i) ASSERT_EQ(a[i], b[i]) << i << " of " << f32.params().count();
  }
  const Evaluation e32 = f32.evaluate(), e16 = loaded.evaluate();
  EXPECT_NEAR(e16.loss, e32.loss, 0.02 * e32.loss);
  std::filesystem::remove(path);
  std::filesystem::remove(optimizer_path(path));
}

}  // namespace
}  // namespace crumb
