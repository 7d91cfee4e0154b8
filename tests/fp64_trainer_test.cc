// --precision fp64 through the Trainer: a float64 run follows the float32 run of the same settings within
// float32's rounding, with either optimizer; its gradients are the slope of its loss (central differences in
// float64), micro-batched; it asks for the CPU. TorchParity.* holds it to torchvision's float64 numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/train/trainer.h"

namespace crumb {
namespace {

TrainConfig synthetic_config(Precision precision, OptimizerKind optimizer) {
  TrainConfig cfg;
  cfg.model = "lenet5";
  cfg.data.dataset = "synthetic";
  cfg.data.limit_train = 128;
  cfg.data.limit_test = 32;
  cfg.batch = 32;
  cfg.micro_batch = 12;  // ragged: 12, 12, 8
  cfg.epochs = 1;
  cfg.seed = 4;
  cfg.device = Device::CPU;
  cfg.precision = precision;
  cfg.optimizer = default_optimizer(optimizer);
  return cfg;
}

struct Trained {
  std::vector<double> losses;  // per step
  std::vector<double> weights;  // every parameter, in order
  double test_loss = 0;
};

struct StepLosses : Callback {
  std::vector<double>& losses;
  explicit StepLosses(std::vector<double>& l) : losses(l) {}
  void on_step(Trainer&, const StepInfo& s) override { losses.push_back(s.loss); }
};

Trained train(const TrainConfig& cfg) {
  Trainer t(cfg);
  Trained r;
  StepLosses steps(r.losses);
  r.test_loss = t.fit({&steps}).test.loss;
  const Graph& g = t.graph();
  ParamStore& p = t.params();
  p.to_host();
  for (ValueId v : g.params())
    for (int64_t i = 0; i < g.value(v).count(1); ++i)
      r.weights.push_back(p.dtype() == DType::F64 ? static_cast<const double*>(p.data(v))[i]
                                                  : static_cast<const float*>(p.data(v))[i]);
  return r;
}

// The same run in float32 and float64: the float64 one is a float32 one without its rounding, so each
// step's loss and the weights after the epoch agree to float32's rounding grown over 4 steps. Measured
// (printed): losses within 3.4e-9 relative, weights within 1.3e-7 of their norm (AdamW; SGD 5e-8); the
// bounds are 30x and 8x that. A float64 run that differed in more than rounding (another normalisation
// of the inputs, another optimizer formula, data in another order) is off by orders of magnitude more;
// one rounding more (a scalar rounded to float32) is not, and optimizer_test.cc's float64 cases and
// TorchParity.* catch that.
TEST(Fp64Trainer, FollowsTheFloat32Run) {
  for (OptimizerKind kind : {OptimizerKind::Sgd, OptimizerKind::AdamW}) {
    const Trained f32 = train(synthetic_config(Precision::FP32, kind));
    const Trained f64 = train(synthetic_config(Precision::FP64, kind));
    ASSERT_EQ(f64.losses.size(), 4u);
    ASSERT_EQ(f64.losses.size(), f32.losses.size());
    ASSERT_EQ(f64.weights.size(), f32.weights.size());
    double worst_loss = 0, diff2 = 0, norm2 = 0;
    for (std::size_t s = 0; s < f64.losses.size(); ++s)
      worst_loss = std::max(worst_loss, std::abs(f64.losses[s] - f32.losses[s]) / f64.losses[s]);
    for (std::size_t i = 0; i < f64.weights.size(); ++i) {
      diff2 += (f64.weights[i] - f32.weights[i]) * (f64.weights[i] - f32.weights[i]);
      norm2 += f64.weights[i] * f64.weights[i];
    }
    const double weights = std::sqrt(diff2 / norm2);
    std::printf("%s: float32 against float64: losses %.3g relative, weights %.3g normwise, test loss %.3g\n",
                optimizer_name(kind), worst_loss, weights, std::abs(f64.test_loss - f32.test_loss) / f64.test_loss);
    EXPECT_LT(worst_loss, 1e-7) << optimizer_name(kind);
    EXPECT_LT(weights, 1e-6) << optimizer_name(kind);
    EXPECT_GT(weights, 0.0) << optimizer_name(kind) << ": the float64 run is the float32 one, not float64";
    EXPECT_LT(std::abs(f64.test_loss - f32.test_loss), 1e-7 * f64.test_loss) << optimizer_name(kind);
  }
}

// Each training batch's gradient, micro-batched, is the slope of the loss the trainer evaluates: central
// differences in float64 (step 1e-5) on three parameters of every tensor agree within 1e-6 relative
// (measured: 2.5e-8).
TEST(Fp64Trainer, GradientsAreTheLossSlope) {
  TrainConfig cfg = synthetic_config(Precision::FP64, OptimizerKind::Sgd);
  cfg.data.limit_train = 20;
  cfg.batch = 20;
  cfg.micro_batch = 7;  // 7, 7, 6: the gradient adds three micro-batches
  Trainer t(cfg);
  std::vector<double> grads;
  BatchHooks hooks;
  hooks.before_step = [&grads](Trainer& tr, const BatchResult&) {
    const auto* g = static_cast<const double*>(tr.params().grad_block());
    grads.assign(g, g + tr.params().count());
  };
  t.set_batch_hooks(hooks);
  t.prepare();
  ParamStore& params = t.params();
  ASSERT_EQ(params.dtype(), DType::F64);
  auto* w = static_cast<double*>(params.data_block());
  const std::vector<double> start(w, w + params.count());
  t.start_epoch(0);
  StepInfo step;
  ASSERT_TRUE(t.train_batch(step));
  ASSERT_EQ(grads.size(), start.size());
  std::copy(start.begin(), start.end(), w);  // back to where the gradient was taken
  const data::Dataset& batch = t.data().train;
  const double h = 1e-5;
  double worst = 0;
  int checked = 0;
  const Graph& g = t.graph();
  for (ValueId p : g.params()) {
    const std::size_t at = params.byte_offset(p) / sizeof(double);
    const int64_t n = g.value(p).count(1);
    for (int64_t k = 0; k < 3; ++k) {
      const std::size_t i = at + static_cast<std::size_t>((k * 7919) % n);
      w[i] = start[i] + h;
      const double up = t.evaluate(batch).loss;
      w[i] = start[i] - h;
      const double down = t.evaluate(batch).loss;
      w[i] = start[i];
      const double slope = (up - down) / (2 * h);
      const double error = std::abs(slope - grads[i]) / std::max(std::abs(grads[i]), 1e-3);
      worst = std::max(worst, error);
      EXPECT_LT(error, 1e-6) << g.value(p).name << " element " << i - at << ": gradient " << grads[i]
                             << ", slope of the loss " << slope;
      ++checked;
    }
  }
  std::printf("%d parameters: largest relative difference of gradient and slope %.3g\n", checked, worst);
  EXPECT_EQ(checked, static_cast<int>(3 * g.params().size()));
}

// fp64 runs on the CPU only: asking for CUDA is one error naming the precision, before any device or data
// is touched (so it holds without a GPU), and without a device the run takes the CPU.
TEST(Fp64Trainer, RunsOnTheCpuOnly) {
  TrainConfig cfg = synthetic_config(Precision::FP64, OptimizerKind::Sgd);
  cfg.device = Device::CUDA;
  try {
    Trainer t(cfg);
    ADD_FAILURE() << "an fp64 run was planned for CUDA";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--precision fp64 runs on the CPU only"), std::string::npos) << e.what();
  }
  cfg.device.reset();
  EXPECT_EQ(pick_device(cfg), Device::CPU);
  EXPECT_THROW(check_precision_device(Precision::FP64, Device::CUDA), Error);
  EXPECT_NO_THROW(check_precision_device(Precision::FP64, Device::CPU));
  EXPECT_NO_THROW(check_precision_device(Precision::FP32, Device::CUDA));
  EXPECT_EQ(activation_dtype(Precision::FP64), DType::F64);
  Precision named = Precision::FP32;
  ASSERT_TRUE(precision_named("fp64", named));
  EXPECT_EQ(named, Precision::FP64);
  EXPECT_STREQ(precision_name(Precision::FP64), "fp64");
}

}  // namespace
}  // namespace crumb
