// Crumb's resnet18 and vgg11_bn against torchvision's (tests/torchvision_reference.h, from
// tools/bench/torchvision_reference.py): the same weights, batch and SGD steps give the same losses,
// weights, running statistics and num_batches_tracked, in each BatchNorm mode and with GroupNorm. Both run
// in float64 (the script says why): Crumb's Trainer at --precision fp64, whose SGD is torch.optim.SGD's in
// float64 (optimizer_test.cc checks it alone), on the batch as float32 images, the script's inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/train/model_registry.h"
#include "engine/train/trainer.h"
#include "tests/batch_outcome.h"
#include "tests/reference_formulas.h"
#include "tests/torchvision_reference.h"

namespace crumb {
namespace {

using reference::TensorSummary;
using test::init_like_reference;

// Float64 rounding, amplified by three steps of a network whose float32 losses already differ by 20%;
// every figure agrees within 5e-12 relative here (each test prints its largest difference).
constexpr double kTolerance = 1e-9;

// The loss of every optimizer step.
struct StepLosses : Callback {
  std::vector<double> losses;
  void on_step(Trainer&, const StepInfo& s) override { losses.push_back(s.loss); }
};

void check_against_torch(const std::string& model, int batch, models::NormSpec norm, int micro_batch,
                         const double* losses, const std::vector<TensorSummary>& want) {
  using namespace reference;
  // Dropout 0: torchvision's masks cannot be drawn here (dropout_test.cc checks Crumb's).
  Graph model_graph = models::build(model, {kChannels, kSize, kSize, kClasses, norm, 0.0}, DType::F64);
  // The formula overwrites every parameter: init only sets the state (running_var 1), without drawing
  // vgg11_bn's 129M normal values first.
  for (ValueId p : model_graph.params()) model_graph.value(p).init = ParamInit::constant(0);
  // The batch is the whole data, in order: each epoch is one step on it.
  TrainConfig cfg;
  cfg.model = model;
  cfg.device = Device::CPU;
  cfg.precision = Precision::FP64;
  cfg.batch = batch;
  cfg.micro_batch = micro_batch;
  cfg.epochs = kSteps;
  cfg.shuffle = false;
  cfg.optimizer = OptimizerConfig{};
  cfg.optimizer.lr = kLr;
  cfg.optimizer.momentum = kMomentum;
  cfg.optimizer.weight_decay = kWeightDecay;
  // vgg11_bn's float64 weights, gradients and momentum alone are 3 GiB: room for them at the micro-batch given.
  cfg.memory_budget = std::size_t{16} << 30;
  const std::size_t pixels = static_cast<std::size_t>(batch) * kChannels * kSize * kSize;
  Trainer trainer(cfg, std::move(model_graph),
                  test::batch_of(test::reference_inputs<float>(pixels), {kChannels, kSize, kSize},
                                 test::reference_labels(batch, kClasses), kClasses));
  const Graph& g = trainer.graph();
  trainer.set_initial_state([&g](ParamStore& p) { init_like_reference<double>(g, p); });
  StepLosses steps;
  trainer.fit({&steps});
  ASSERT_EQ(trainer.micro_batch(), micro_batch);
  ASSERT_EQ(steps.losses.size(), static_cast<std::size_t>(kSteps));
  // The largest difference from torchvision's, relative to each figure's scale: what the tolerance bounds.
  double worst = 0;
  auto near = [&worst](double got, double want, double scale) {
    worst = std::max(worst, std::abs(got - want) / scale);
    return std::abs(got - want) <= kTolerance * scale;
  };
  for (int step = 0; step < kSteps; ++step)
    EXPECT_TRUE(near(steps.losses[step], losses[step], losses[step]))
        << "loss of step " << step << ": " << steps.losses[step] << ", torchvision's " << losses[step];
  ParamStore& params = trainer.params();
  params.to_host();
  std::size_t checked = 0;
  for (const TensorSummary& t : want) {
    const ValueId v = g.find_value(t.name);
    ASSERT_GE(v, 0) << "torchvision's " << t.name << " is not in Crumb's model";
    const Value& val = g.value(v);
    const int64_t n = val.count(1);
    if (val.dtype == DType::I64) {
      EXPECT_EQ(*static_cast<const int64_t*>(params.state(v)), static_cast<int64_t>(t.l2)) << t.name;
    } else {
      const double* data = static_cast<const double*>(val.kind == ValueKind::State ? params.state(v) : params.data(v));
      const auto [l2, dot] = test::summarise<kCosinePeriod>(data, n);
      EXPECT_TRUE(near(l2, t.l2, t.l2)) << t.name << ": L2 " << l2 << ", torchvision's " << t.l2;
      EXPECT_TRUE(near(dot, t.dot, t.l2 * std::sqrt(static_cast<double>(n))))
          << t.name << ": dot " << dot << ", torchvision's " << t.dot;
    }
    ++checked;
  }
  std::printf("%s: largest relative difference from torchvision %.3g (tolerance %.0e)\n", model.c_str(), worst,
              kTolerance);
  EXPECT_EQ(checked, g.params().size() + g.states().size()) << "Crumb's model has tensors torchvision's has not";
}

template <std::size_t N> std::vector<TensorSummary> all(const TensorSummary (&t)[N]) { return {t, t + N}; }

models::NormSpec whole_batch() {
  models::NormSpec norm;
  norm.bn.group = 0;
  return norm;
}

models::NormSpec group_norm() {
  models::NormSpec norm;
  norm.kind = models::NormSpec::Kind::Group;
  return norm;
}

TEST(TorchParity, ResNet18BatchNormOverTheBatch) {
  using namespace reference;
  check_against_torch("resnet18", kResNetBatch, whole_batch(), kResNetBatch, kResNetBatchLosses, all(kResNetBatchTensors));
}

// PyTorch accumulating micro-batches of 4; Crumb with groups of 4 runs the batch as one micro-batch.
TEST(TorchParity, ResNet18PerGroupStatisticsEqualPyTorchGradientAccumulation) {
  using namespace reference;
  models::NormSpec norm;
  norm.bn.group = 4;
  norm.bn.stats = BnStats::PerGroup;
  check_against_torch("resnet18", kResNetBatch, norm, kResNetBatch, kResNetPerGroupLosses, all(kResNetPerGroupTensors));
}

TEST(TorchParity, ResNet18GroupNorm) {
  using namespace reference;
  check_against_torch("resnet18", kResNetBatch, group_norm(), 3, kResNetGroupNormLosses, all(kResNetGroupNormTensors));
}

TEST(TorchParity, Vgg11BnBatchNormOverTheBatch) {
  using namespace reference;
  check_against_torch("vgg11_bn", kVggBatch, whole_batch(), kVggBatch, kVggBatchLosses, all(kVggBatchTensors));
}

TEST(TorchParity, Vgg11BnGroupNorm) {
  using namespace reference;
  check_against_torch("vgg11_bn", kVggBatch, group_norm(), 1, kVggGroupNormLosses, all(kVggGroupNormTensors));
}

}  // namespace
}  // namespace crumb
