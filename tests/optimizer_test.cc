// The optimizers against PyTorch: AdamW and SGD (Nesterov included) through the Optimizer interface
// on the CPU and on CUDA reproduce torch.optim's numbers (tests/optimizer_reference.h, computed once
// by tools/bench/adamw_reference.py) to float rounding; the learning-rate schedules reproduce
// PyTorch's schedulers; bad configurations are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/device/backend.h"
#include "engine/base/error.h"
#include "engine/optim/optimizer.h"
#include "tests/optimizer_configs.h"
#include "tests/optimizer_reference.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

using reference::kRefCount;
using reference::kRefSteps;
using Floats = std::vector<float>;

// Distance in units in the last place (adjacent values are 1 apart; +0 and -0 are 0 apart).
template <class T> int64_t ulps(T a, T b) {
  using Bits = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  auto ordered = [](T f) {
    Bits i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? std::numeric_limits<Bits>::min() - i : i;
  };
  return std::abs(static_cast<int64_t>(ordered(a)) - static_cast<int64_t>(ordered(b)));
}

// One parameter of kRefCount elements, the reference's tensor, in a store on `device`, of T: float, or
// double (a float64 graph's parameters, --precision fp64).
template <class T> struct OneTensorOf {
  using Values = std::vector<T>;
  Graph g;
  ValueId p;
  ParamStore params;
  explicit OneTensorOf(Device device)
      : g(graph()), p(g.param("w", {kRefCount}, {})), params(g, device) {
    T* w = static_cast<T*>(params.data(p));
    for (int i = 0; i < kRefCount; ++i) w[i] = reference::param_init(i);
    params.to_device();
  }
  static Graph graph() {
    Graph g;
    if (std::is_same_v<T, double>) g.set_float_dtype(DType::F64);
    return g;
  }
  void set_grad(int step) {
    Values grad(kRefCount);
    for (int i = 0; i < kRefCount; ++i) grad[i] = reference::grad_at(i, step);
    copy_bytes(params.device_grad(p), memory_of(params.device()), grad.data(), Memory::Host, grad.size() * sizeof(T));
  }
  // The reference's steps through the optimizer built from cfg; returns the parameter then each state block.
  std::vector<Values> run(const OptimizerConfig& cfg) {
    const std::unique_ptr<Optimizer> opt = make_optimizer(params, cfg);
    for (int s = 0; s < kRefSteps; ++s) {
      set_grad(s);
      opt->step();
    }
    EXPECT_EQ(opt->steps(), kRefSteps);
    params.to_host();
    opt->to_host();
    const T* w = static_cast<const T*>(params.data(p));
    std::vector<Values> out{Values(w, w + kRefCount)};
    for (const StateBlock& b : opt->state()) {
      const T* state = reinterpret_cast<const T*>(b.block.host());
      out.emplace_back(state, state + kRefCount);
    }
    return out;
  }
};
using OneTensor = OneTensorOf<float>;

// PyTorch's CPU kernels are vectorised and may fuse multiply-adds where ours do not (or the reverse),
// so a value can differ in its last bits. Where terms cancel (SGD's momentum + weight decay) a few
// roundings of the terms are many ulp of the small result, so the bound is kMaxUlps ulp of the
// tensor's largest magnitude: float rounding, while a wrong formula is off by orders of magnitude more.
constexpr int kMaxUlps = 4;

// Agreement with PyTorch to float rounding. Prints the largest absolute difference and the largest
// distance in ulp of the element itself, the figures the report quotes.
template <class T>
void expect_matches(const std::vector<T>& got, const std::array<T, kRefCount>& want, const std::string& what) {
  T scale = 0;
  for (T w : want) scale = std::max(scale, std::abs(w));
  const double bound = kMaxUlps * double(std::nextafter(scale, INFINITY) - scale);
  double max_abs = 0;
  int64_t max_ulp = 0;
  for (int i = 0; i < kRefCount; ++i) {
    const double diff = std::abs(double(got[i]) - want[i]);
    max_abs = std::max(max_abs, diff);
    max_ulp = std::max(max_ulp, ulps(got[i], want[i]));
    EXPECT_LE(diff, bound) << what << " [" << i << "]: " << got[i] << " vs torch " << want[i];
  }
  std::printf("%-28s max |crumb - torch| = %.3g (%lld ulp of the element, bound %.3g)\n", what.c_str(), max_abs,
              static_cast<long long>(max_ulp), bound);
}

void check_adamw(Device device) {
  for (std::size_t c = 0; c < std::size(reference::kAdamW); ++c) {
    const reference::AdamWCase& ref = reference::kAdamW[c];
    const OptimizerConfig cfg = adamw_config(ref.lr, ref.weight_decay, ref.beta1, ref.beta2, ref.eps);
    OneTensor t(device);
    const std::vector<Floats> got = t.run(cfg);
    ASSERT_EQ(got.size(), 3u);
    const std::string at = std::string("adamw ") + device_name(device) + " case " + std::to_string(c);
    expect_matches(got[0], ref.param, at + " param");
    expect_matches(got[1], ref.exp_avg, at + " exp_avg");
    expect_matches(got[2], ref.exp_avg_sq, at + " exp_avg_sq");
    if (device != Device::CPU) continue;  // float64 parameters train on the CPU only
    OneTensorOf<double> t64(device);
    const std::vector<std::vector<double>> got64 = t64.run(cfg);
    ASSERT_EQ(got64.size(), 3u);
    expect_matches(got64[0], ref.param64, at + " float64 param");
    expect_matches(got64[1], ref.exp_avg64, at + " float64 exp_avg");
    expect_matches(got64[2], ref.exp_avg_sq64, at + " float64 exp_avg_sq");
  }
}

void check_sgd(Device device) {
  for (std::size_t c = 0; c < std::size(reference::kSgd); ++c) {
    const reference::SgdCase& ref = reference::kSgd[c];
    const OptimizerConfig cfg = sgd_config(ref.lr, ref.momentum, ref.weight_decay, ref.nesterov);
    OneTensor t(device);
    const std::vector<Floats> got = t.run(cfg);
    ASSERT_EQ(got.size(), 2u);
    const std::string at = std::string("sgd ") + device_name(device) + " case " + std::to_string(c);
    expect_matches(got[0], ref.param, at + " param");
    expect_matches(got[1], ref.momentum_buffer, at + " momentum");
    if (device != Device::CPU) continue;
    OneTensorOf<double> t64(device);
    const std::vector<std::vector<double>> got64 = t64.run(cfg);
    ASSERT_EQ(got64.size(), 2u);
    expect_matches(got64[0], ref.param64, at + " float64 param");
    expect_matches(got64[1], ref.momentum_buffer64, at + " float64 momentum");
  }
}

// Every step counts the parameters it left NaN or infinite, on the parameters' device: a NaN or infinite
// gradient shows up at once, whichever optimizer.
template <class T = float> void check_nonfinite_count(Device device) {
  for (const OptimizerConfig& cfg : {sgd_config(0.1, 0.9, 0.0), adamw_config(1e-3, 0.01)}) {
    OneTensorOf<T> t(device);
    const std::unique_ptr<Optimizer> opt = make_optimizer(t.params, cfg);
    EXPECT_EQ(opt->nonfinite_parameters(), 0u);
    t.set_grad(0);
    opt->step();
    EXPECT_EQ(opt->nonfinite_parameters(), 0u);
    std::vector<T> grad(kRefCount, T(0.5));
    grad[3] = NAN;
    grad[30] = INFINITY;
    copy_bytes(t.params.device_grad(t.p), memory_of(device), grad.data(), Memory::Host, grad.size() * sizeof(T));
    opt->step();
    EXPECT_EQ(opt->nonfinite_parameters(), 2u) << optimizer_name(cfg.kind);
  }
}

// The same over a block of many runs, which the CPU's kernels count in their own pass, a run (4096
// parameters) at a time, split among the threads: non-finite gradients at the first and last parameter and
// on both sides of run and thread boundaries, with and without momentum and with AdamW.
template <class T> void check_nonfinite_count_over_runs(Device device) {
  constexpr int kCount = 100003;  // 24 whole runs and a ragged one; over kParallelGrain, so threaded
  for (const OptimizerConfig& cfg : {sgd_config(0.1, 0.9, 0.0), sgd_config(0.1, 0.0, 0.0), adamw_config(1e-3, 0.01)}) {
    Graph g;
    if (std::is_same_v<T, double>) g.set_float_dtype(DType::F64);
    const ValueId p = g.param("w", {kCount}, {});
    ParamStore params(g, device);
    std::fill_n(static_cast<T*>(params.data(p)), kCount, T(0.25));
    params.to_device();
    const std::unique_ptr<Optimizer> opt = make_optimizer(params, cfg);
    std::vector<T> grad(kCount, T(0.5));
    auto step = [&] {
      copy_bytes(params.device_grad(p), memory_of(device), grad.data(), Memory::Host, grad.size() * sizeof(T));
      opt->step();
      return opt->nonfinite_parameters();
    };
    EXPECT_EQ(step(), 0u) << optimizer_name(cfg.kind);
    for (int i : {0, 4095, 4096, 50001, 50002, kCount - 1}) grad[i] = i % 2 ? T(NAN) : -std::numeric_limits<T>::infinity();
    EXPECT_EQ(step(), 6u) << optimizer_name(cfg.kind) << " momentum " << cfg.momentum;
  }
}

TEST(Optimizer, CountsNonFiniteParametersOnCpu) {
  check_nonfinite_count(Device::CPU);
  check_nonfinite_count<double>(Device::CPU);
  check_nonfinite_count_over_runs<float>(Device::CPU);
  check_nonfinite_count_over_runs<double>(Device::CPU);
}
TEST(Optimizer, CountsNonFiniteParametersOnCuda) {
  CRUMB_REQUIRE_GPU();
  check_nonfinite_count(Device::CUDA);
  check_nonfinite_count_over_runs<float>(Device::CUDA);
}

TEST(Optimizer, AdamWMatchesTorchOnCpu) { check_adamw(Device::CPU); }
TEST(Optimizer, SgdMatchesTorchOnCpu) { check_sgd(Device::CPU); }

TEST(Optimizer, AdamWMatchesTorchOnCuda) {
  CRUMB_REQUIRE_GPU();
  check_adamw(Device::CUDA);
}

TEST(Optimizer, SgdMatchesTorchOnCuda) {
  CRUMB_REQUIRE_GPU();
  check_sgd(Device::CUDA);
}

TEST(Optimizer, StateBlocksHavePyTorchNames) {
  OneTensor t(Device::CPU);
  auto names = [&](const OptimizerConfig& cfg) {
    const std::unique_ptr<Optimizer> opt = make_optimizer(t.params, cfg);
    std::vector<std::string> n;
    for (const StateBlock& b : opt->state()) n.push_back(b.name);
    return n;
  };
  EXPECT_EQ(names(adamw_config(1e-3, 0.01)), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(names(sgd_config(0.1, 0.9, 0)), std::vector<std::string>{"momentum"});
  EXPECT_TRUE(names(sgd_config(0.1, 0, 0)).empty());
  EXPECT_EQ(make_optimizer(t.params, adamw_config(1e-3, 0.01))->state_bytes(), 2 * t.params.bytes());
}

// Resuming at step k (state and count restored) continues exactly: AdamW's bias corrections follow
// the restored count.
TEST(Optimizer, AdamWResumesFromStepCount) {
  const OptimizerConfig cfg = adamw_config(0.05, 0.1, 0.8, 0.99, 1e-6);
  OneTensor whole(Device::CPU), split(Device::CPU);
  const std::vector<Floats> want = whole.run(cfg);
  auto first = make_optimizer(split.params, cfg);
  for (int s = 0; s < 2; ++s) {
    split.set_grad(s);
    first->step();
  }
  auto second = make_optimizer(split.params, cfg);
  for (std::size_t b = 0; b < 2; ++b)
    std::memcpy(second->state()[b].host(), first->state()[b].host(), first->state()[b].block.size());
  second->set_steps(first->steps());
  for (int s = 2; s < kRefSteps; ++s) {
    split.set_grad(s);
    second->step();
  }
  const float* w = static_cast<const float*>(split.params.data(split.p));
  EXPECT_EQ(Floats(w, w + kRefCount), want[0]);
}

// ---- learning-rate schedules

TEST(LrSchedule, MatchesTorchSchedulers) {
  for (const reference::ScheduleCase& ref : reference::kSchedules) {
    LrSchedule s;
    s.kind = ref.kind;
    s.warmup_steps = ref.warmup_steps;
    s.step_size = ref.step_size;
    s.gamma = ref.gamma;
    s.total_steps = ref.total_steps;
    s.validate();
    for (int k = 0; k < reference::kRefScheduleSteps; ++k)
      EXPECT_NEAR(s.lr(0.1, k), ref.lr[k], 1e-12 * ref.lr[k])
          << lr_schedule_name(ref.kind) << " warmup " << ref.warmup_steps << " step " << k;
  }
}

// The optimizer takes one schedule value per step: plain SGD with gradient 1 moves each weight by
// exactly -lr(k) at step k.
TEST(LrSchedule, OptimizerStepsItOncePerStep) {
  OptimizerConfig cfg = sgd_config(0.5, 0, 0);
  cfg.schedule.kind = LrSchedule::Kind::Step;
  cfg.schedule.step_size = 2;
  cfg.schedule.gamma = 0.5;
  cfg.schedule.warmup_steps = 2;
  OneTensor t(Device::CPU);
  float* w = static_cast<float*>(t.params.data(t.p));
  float* g = static_cast<float*>(t.params.grad(t.p));
  std::fill(g, g + kRefCount, 1.0f);
  const auto opt = make_optimizer(t.params, cfg);
  const std::vector<double> want{0.25, 0.5, 0.25, 0.25, 0.125};
  for (std::size_t k = 0; k < want.size(); ++k) {
    EXPECT_EQ(opt->lr(static_cast<long long>(k)), want[k]) << k;
    const float before = w[0];
    opt->step();
    EXPECT_EQ(before - w[0], static_cast<float>(want[k])) << k;
  }
}

TEST(LrSchedule, CosineReachesZeroAtTheEndOfTheRun) {
  LrSchedule s;
  s.kind = LrSchedule::Kind::Cosine;
  s.total_steps = 10;
  EXPECT_EQ(s.lr(0.1, 0), 0.1);
  EXPECT_NEAR(s.lr(0.1, 10), 0.0, 1e-18);
  EXPECT_GT(s.lr(0.1, 9), 0.0);
}

void expect_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error, expected one containing '" << what << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(Optimizer, BadConfigurationsAreClearErrors) {
  OneTensor t(Device::CPU);
  auto build = [&](OptimizerConfig cfg) { return [&t, cfg] { make_optimizer(t.params, cfg); }; };
  expect_error(build(sgd_config(0, 0.9, 0)), "learning rate must be > 0");
  expect_error(build(sgd_config(0.1, 1.0, 0)), "momentum must be in [0, 1)");
  expect_error(build(sgd_config(0.1, 0, 0, true)), "Nesterov momentum needs a momentum > 0");
  expect_error(build(adamw_config(1e-3, 0.01, 1.0)), "beta1 must be in [0, 1)");
  expect_error(build(adamw_config(1e-3, 0.01, 0.9, -0.1)), "beta2 must be in [0, 1)");
  expect_error(build(adamw_config(1e-3, 0.01, 0.9, 0.999, 0)), "eps must be > 0");
  expect_error(build(adamw_config(1e-3, -1)), "weight decay must be >= 0");
  OptimizerConfig cosine = adamw_config(1e-3, 0.01);
  cosine.schedule.kind = LrSchedule::Kind::Cosine;
  expect_error(build(cosine), "total number of optimizer steps");
  OptimizerConfig step = sgd_config(0.1, 0.9, 0);
  step.schedule.kind = LrSchedule::Kind::Step;
  step.schedule.step_size = 0;
  expect_error(build(step), "step size must be >= 1");
}

}  // namespace
}  // namespace crumb
