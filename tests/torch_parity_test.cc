// Crumb's resnet18 and vgg11_bn against torchvision's (tests/torchvision_reference.h, from
// tools/bench/torchvision_reference.py): the same weights, batch and SGD steps give the same losses,
// weights, running statistics and num_batches_tracked, in each BatchNorm mode and with GroupNorm. Both run in float64 (the script says
// why); the SGD step is torch.optim.SGD's, written out here because Crumb's optimizers are float32
// (they are checked against PyTorch's in optimizer_test.cc).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/train/scheduler.h"
#include "engine/ops/norm.h"
#include "engine/train/model_registry.h"
#include "tests/reference_formulas.h"
#include "tests/torchvision_reference.h"

namespace crumb {
namespace {

using reference::TensorSummary;
using test::init_like_reference;

// torch.optim.SGD (dampening 0, no Nesterov): g = grad + wd * p; buf = g on the first step, else
// momentum * buf + g; p -= lr * buf.
class Sgd {
 public:
  explicit Sgd(ParamStore& params) : params_(params), buf_(params.count()) {}
  void step() {
    using namespace reference;
    double* p = static_cast<double*>(params_.data_block());
    const double* grad = static_cast<const double*>(params_.grad_block());
    for (std::size_t i = 0; i < buf_.size(); ++i) {
      const double g = grad[i] + kWeightDecay * p[i];
      buf_[i] = first_ ? g : kMomentum * buf_[i] + g;
      p[i] -= kLr * buf_[i];
    }
    first_ = false;
  }

 private:
  ParamStore& params_;
  std::vector<double> buf_;
  bool first_ = true;
};

// Float64 rounding, amplified by three steps of a network whose float32 losses already differ by 20%;
// every figure agrees within 1e-10 relative here.
constexpr double kTolerance = 1e-9;

void check_against_torch(const std::string& model, int batch, models::NormSpec norm, int micro_batch,
                         const double* losses, const std::vector<TensorSummary>& want) {
  using namespace reference;
  // Dropout 0: torchvision's masks cannot be drawn here (dropout_test.cc checks Crumb's).
  Graph g = models::build(model, {kChannels, kSize, kSize, kClasses, norm, 0.0}, DType::F64);
  build_backward(g);
  // The formula overwrites every parameter: init only sets the state (running_var 1), without drawing
  // vgg11_bn's 129M normal values first.
  for (ValueId p : g.params()) g.value(p).init = ParamInit::constant(0);
  ParamStore params(g);
  params.init(0);
  init_like_reference<double>(g, params);
  Arena arena;
  Scheduler sched(g, params, arena, micro_batch);
  Sgd opt(params);
  const std::vector<double> x =
      test::reference_inputs<double>(static_cast<std::size_t>(batch) * kChannels * kSize * kSize);
  const std::vector<int32_t> y = test::reference_labels(batch, kClasses);
  for (int step = 0; step < kSteps; ++step) {
    const BatchResult r = sched.train_batch({{"x", x.data()}, {"y", y.data()}}, batch);
    EXPECT_NEAR(r.loss_sum / batch, losses[step], kTolerance * losses[step]) << "loss of step " << step;
    opt.step();
  }
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
      EXPECT_NEAR(l2, t.l2, kTolerance * t.l2) << t.name;
      EXPECT_NEAR(dot, t.dot, kTolerance * t.l2 * std::sqrt(static_cast<double>(n))) << t.name;
    }
    ++checked;
  }
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
