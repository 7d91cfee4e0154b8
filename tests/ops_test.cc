// Every op case (tests/ops/registry.h) in float32 through the real autograd, planner and executor, in the
// two modes that run on real devices: the CPU against CUDA (OpParity), and the gradient write modes of a
// batch's micro-batches on each device (OpAccumulate). The CUDA tests skip without a usable device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "engine/device/buffer.h"
#include "engine/run/executor.h"
#include "tests/op_cases.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

using Floats = std::vector<float>;

// A second micro-batch adds the same gradients again: the sum is twice the first within the float
// rounding of one addition (in-kernel accumulation may add partial sums in another order).
constexpr double kAccumulateTolerance = 1e-5;

// What a run leaves behind, copied to the host.
struct OpResult {
  double loss_sum = 0;  // summed over the batch's runs so far
  Floats dx;            // gradient of the input (an activation: rewritten by every run)
  Floats grads;         // the whole parameter-gradient block
};

// One op case compiled for a device, with its inputs bound: random x and labels, the same on every device.
class OpRunner {
 public:
  OpRunner(const test::OpCase& c, Device device)
      : batch_(c.batch), g_(test::op_graph(c, DType::F32)), params_(g_, device), arena_(device) {
    params_.init(7);
    exec_ = std::make_unique<Executor>(g_, params_, arena_, batch_, Pass::Train);
    const ValueId x = g_.find_value("x"), y = g_.find_value("y");
    dx_ = g_.value(x).grad;
    const Floats xs = test::random_floats(g_.value(x).count(batch_), 8);
    const std::vector<int32_t> ys = test::random_labels(batch_, static_cast<int>(g_.value(g_.loss()).dims[0]), 9);
    xbuf_ = Buffer(xs.size() * sizeof(float), memory_of(device));
    ybuf_ = Buffer(ys.size() * sizeof(int32_t), memory_of(device));
    copy_bytes(xbuf_.data(), xbuf_.kind(), xs.data(), Memory::Host, xbuf_.size());
    copy_bytes(ybuf_.data(), ybuf_.kind(), ys.data(), Memory::Host, ybuf_.size());
    exec_->bind(x, xbuf_.data());
    exec_->bind(y, ybuf_.data());
  }

  // One micro-batch of the whole batch: the first of a batch writes the parameter gradients, a later
  // one adds to them.
  OpResult run(bool first_micro_batch) {
    exec_->run(batch_, first_micro_batch, true, 1.0 / batch_);
    OpResult r;
    r.loss_sum = exec_->results().loss_sum;
    r.dx.resize(g_.value(dx_).count(batch_));
    copy_bytes(r.dx.data(), Memory::Host, exec_->data(dx_), memory_of(device()), r.dx.size() * sizeof(float));
    params_.to_host();
    const float* gp = static_cast<const float*>(params_.grad_block());
    r.grads.assign(gp, gp + params_.count());
    return r;
  }

  // Fills every parameter's gradient and the whole arena (activations, the input gradient, workspaces)
  // with `garbage`. Not the padding between parameters: nothing writes it, and it must stay zero.
  void fill_with(float garbage) {
    for (ValueId p : g_.params())
      std::fill_n(static_cast<float*>(params_.grad(p)), g_.value(p).count(1), garbage);
    // On the CPU the host copy is the block the executor writes.
    if (device() != Device::CPU)
      copy_bytes(params_.device_grad_block(), Memory::Cuda, params_.grad_block(), Memory::Host, params_.bytes());
    const Floats junk(arena_.size() / sizeof(float), garbage);
    copy_bytes(arena_.base(), memory_of(device()), junk.data(), Memory::Host, junk.size() * sizeof(float));
  }

  Device device() const { return params_.device(); }
  bool recording() const { return exec_->recording(); }
  void set_recording(bool on) { exec_->set_recording(on); }

 private:
  int batch_;
  Graph g_;
  ParamStore params_;
  Arena arena_;
  std::unique_ptr<Executor> exec_;
  ValueId dx_ = -1;
  Buffer xbuf_, ybuf_;
};

// ---- OpParity: the CPU against CUDA, after one run and after a second run that accumulates.

class OpParity : public ::testing::TestWithParam<test::OpCase> {};

// On the device both ways: replaying recorded runs (CUDA graphs; every op must stay capturable, or the
// executor would quietly fall back) and issuing each step from the host.
TEST_P(OpParity, CpuVsCuda) {
  CRUMB_REQUIRE_GPU();
  for (bool record : {true, false}) {
    SCOPED_TRACE(record ? "recorded runs" : "host-issued runs");
    OpRunner cpu_run(GetParam(), Device::CPU), gpu_run(GetParam(), Device::CUDA);
    gpu_run.set_recording(record);
    for (bool first : {true, false}) {
      SCOPED_TRACE(first ? "one run" : "second run accumulates");
      const OpResult cpu = cpu_run.run(first), gpu = gpu_run.run(first);
      EXPECT_NEAR(gpu.loss_sum, cpu.loss_sum, test::kParityTolerance * std::max(1.0, std::fabs(cpu.loss_sum)));
      EXPECT_LE(test::relative_error(gpu.dx, cpu.dx), test::kParityTolerance) << "input gradient";
      EXPECT_LE(test::relative_error(gpu.grads, cpu.grads), test::kParityTolerance) << "parameter gradients";
    }
    EXPECT_EQ(gpu_run.recording(), record) << "a step refused capture";
  }
}

INSTANTIATE_TEST_SUITE_P(, OpParity, ::testing::ValuesIn(test::op_cases()), test::op_case_name);

// ---- OpAccumulate: with the gradient buffers and the arena full of garbage, a batch's first micro-batch
// must overwrite them (the same results as a run on clean buffers), and a second one (first_micro_batch
// = false) must add exactly: twice the parameter gradients and the loss, the same input gradient.

void check_accumulation(const test::OpCase& c, Device device) {
  OpRunner r(c, device);
  const OpResult clean = r.run(true);
  // NaN shows any arithmetic read of the old contents, even 0 * old; a huge finite value shows the
  // reads NaN slips through (fmax/fmin ignore a NaN operand).
  for (float garbage : {std::numeric_limits<float>::quiet_NaN(), 1e30f}) {
    SCOPED_TRACE(std::isnan(garbage) ? "buffers full of NaN" : "buffers full of 1e30");
    r.fill_with(garbage);
    const OpResult first = r.run(true);
    EXPECT_NEAR(first.loss_sum, clean.loss_sum, kAccumulateTolerance * std::fabs(clean.loss_sum));
    EXPECT_LE(test::relative_error(first.dx, clean.dx), kAccumulateTolerance) << "input gradient, first run";
    EXPECT_LE(test::relative_error(first.grads, clean.grads), kAccumulateTolerance) << "parameter gradients, first run";

    const OpResult second = r.run(false);
    Floats twice = clean.grads;
    for (float& v : twice) v *= 2;
    EXPECT_NEAR(second.loss_sum, 2 * clean.loss_sum, kAccumulateTolerance * std::fabs(clean.loss_sum));
    EXPECT_LE(test::relative_error(second.dx, clean.dx), kAccumulateTolerance) << "input gradient, second run";
    EXPECT_LE(test::relative_error(second.grads, twice), kAccumulateTolerance) << "parameter gradients, second run";
  }
}

class OpAccumulate : public ::testing::TestWithParam<test::OpCase> {};

TEST_P(OpAccumulate, Cpu) { check_accumulation(GetParam(), Device::CPU); }
TEST_P(OpAccumulate, Cuda) {
  CRUMB_REQUIRE_GPU();
  check_accumulation(GetParam(), Device::CUDA);
}

INSTANTIATE_TEST_SUITE_P(, OpAccumulate, ::testing::ValuesIn(test::op_cases()), test::op_case_name);

}  // namespace
}  // namespace crumb
