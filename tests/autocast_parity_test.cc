// Crumb's bf16 mixed precision against torch.autocast("cpu", dtype=torch.bfloat16)
// (tests/autocast_reference.h, from tools/bench/autocast_reference.py): lenet5 and resnet20 from the same
// weights take one SGD step on the same batch in a BF16 graph, and the losses, each parameter's update
// and the BatchNorm statistics come out as autocast's, much closer to them than float32's are.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/optim/optimizer.h"
#include "engine/train/model_registry.h"
#include "engine/train/scheduler.h"
#include "tests/autocast_reference.h"
#include "tests/reference_formulas.h"

namespace crumb {
namespace {

using namespace autocast_reference;

constexpr int kCosinePeriod = 1021;  // tools/bench/torchvision_reference.py's

template <std::size_t N> void check_against_autocast(const std::string& model, const Losses& losses,
                                                     const Losses& fp32_losses, const TensorSummary (&want)[N]) {
  models::NormSpec norm;
  norm.bn.group = 0;  // BatchNorm over the batch, as PyTorch's
  Graph g = models::build(model, {kChannels, kSize, kSize, kClasses, norm, 0.0}, DType::BF16);
  build_backward(g);
  ParamStore params(g);
  params.init(0);
  test::init_like_reference<float>(g, params);
  params.to_device();  // the masters to their bf16 copies
  const std::vector<float> before(static_cast<const float*>(params.data_block()),
                                  static_cast<const float*>(params.data_block()) + params.count());
  Arena arena;
  Scheduler sched(g, params, arena, kBatch);
  OptimizerConfig cfg;
  cfg.lr = kLr;
  cfg.momentum = kMomentum;
  const std::unique_ptr<Optimizer> opt = make_optimizer(params, cfg);
  const std::vector<float> x = test::reference_inputs<float>(std::size_t{kBatch} * kChannels * kSize * kSize);
  const std::vector<int32_t> y = test::reference_labels(kBatch, kClasses);

  const double loss = sched.train_batch({{"x", x.data()}, {"y", y.data()}}, kBatch).loss_sum / kBatch;
  opt->step();
  params.to_host();
  std::printf("%s loss: crumb-autocast %.3g, fp32-autocast %.3g\n", model.c_str(), loss - losses.step,
              fp32_losses.step - losses.step);
  for (const TensorSummary& t : want) {
    const ValueId v = g.find_value(t.name);
    ASSERT_GE(v, 0) << t.name;
    const Value& val = g.value(v);
    const int64_t n = val.count(1);
    if (val.dtype == DType::I64) {
      EXPECT_EQ(*static_cast<const int64_t*>(params.state(v)), static_cast<int64_t>(t.l2)) << t.name;
      continue;
    }
    std::vector<double> got(n);
    if (val.kind == ValueKind::State) {
      const float* s = static_cast<const float*>(params.state(v));
      for (int64_t i = 0; i < n; ++i) got[i] = s[i];
    } else {
      const float* p = static_cast<const float*>(params.data(v));
      const float* p0 = before.data() + params.byte_offset(v) / sizeof(float);
      for (int64_t i = 0; i < n; ++i) got[i] = double(p[i]) - double(p0[i]);
    }
    const auto [l2, dot] = test::summarise<kCosinePeriod>(got.data(), n);
    std::printf("  %-32s l2 %9.2e (fp32 %9.2e)  dot %9.2e (fp32 %9.2e)\n", t.name, (l2 - t.l2) / t.l2,
                (t.fp32_l2 - t.l2) / t.l2, (dot - t.dot) / t.l2, (t.fp32_dot - t.dot) / t.l2);
  }
  const double next = sched.train_batch({{"x", x.data()}, {"y", y.data()}}, kBatch).loss_sum / kBatch;
  std::printf("%s next loss: crumb-autocast %.3g, fp32-autocast %.3g\n", model.c_str(), next - losses.next,
              fp32_losses.next - losses.next);
}

TEST(AutocastParity, LeNet5) { check_against_autocast("lenet5", kLeNet5Losses, kLeNet5Fp32Losses, kLeNet5Tensors); }

TEST(AutocastParity, ResNet20) {
  check_against_autocast("resnet20", kResNet20Losses, kResNet20Fp32Losses, kResNet20Tensors);
}

}  // namespace
}  // namespace crumb
