// Every op case (tests/ops/registry.h) in float32, bf16 and f16 through the real autograd, planner and
// executor, in the two modes that run on real devices: the CPU against CUDA (OpParity), and the gradient
// write modes of a batch's micro-batches on each device (OpAccumulate). The CUDA tests skip without a
// usable device. In bf16 and f16 the input and its gradient are float32 (cast to and from 16-bit by the
// graph), and so are the parameter gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

// The dtypes the device-side modes run in: float32, and bf16 and f16 where the device runs them (CUDA
// before compute capability 8 has no bf16). One test per case and device runs them all: every test is a
// process of its own under ctest.
std::vector<DType> dtypes_on(Device device) {
  std::vector<DType> out;
  const std::vector<DType> runs = backend(device).float_dtypes();
  for (DType t : {DType::F32, DType::BF16, DType::F16})
    if (std::find(runs.begin(), runs.end(), t) != runs.end()) out.push_back(t);
  return out;
}

// One op case in a float dtype compiled for a device, with its inputs bound: random x and labels, the
// same on every device.
class OpRunner {
 public:
  OpRunner(const test::OpCase& c, Device device, DType dtype)
      : batch_(c.batch), g_(test::op_graph(c, dtype)), params_(g_, device), arena_(device) {
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
  // with NaN or with huge values. Not the padding between parameters: nothing writes it, and it must
  // stay zero.
  void fill_with(bool nan) {
    for (ValueId p : g_.params())
      std::fill_n(static_cast<float*>(params_.grad(p)), g_.value(p).count(1), nan ? std::numeric_limits<float>::quiet_NaN() : 1e30f);
    // On the CPU the host copy is the block the executor writes.
    if (device() != Device::CPU)
      copy_bytes(params_.device_grad_block(), Memory::Cuda, params_.grad_block(), Memory::Host, params_.bytes());
    // The arena holds float32 values and, in a 16-bit graph, 16-bit ones: each 16-bit half of these
    // float32 patterns is NaN (0x7fc0: bf16 and f16) or huge (0x7bff: bf16 2.7e36, f16 65504) too.
    const std::vector<uint32_t> junk(arena_.size() / sizeof(uint32_t), nan ? 0x7fc07fc0u : 0x7bff7bffu);
    copy_bytes(arena_.base(), memory_of(device()), junk.data(), Memory::Host, junk.size() * sizeof(uint32_t));
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

// ---- OpParity: the CPU against CUDA, after one run and after a second run that accumulates: in float32
// to float rounding of differently ordered sums; in 16-bit as the 16-bit run against float64 (each side is
// within that of the exact result, and an activation that rounds to neighbouring 16-bit values on the two
// devices is a difference of u).

double parity_tolerance(DType dtype) { return is_half(dtype) ? test::half_tolerance(dtype) : test::kParityTolerance; }

// On the device both ways: replaying recorded runs (CUDA graphs; every op must stay capturable, or the
// executor would quietly fall back) and issuing each step from the host.
void check_parity(const test::OpCase& c, DType dtype) {
  const double tolerance = parity_tolerance(dtype);
  for (bool record : {true, false}) {
    SCOPED_TRACE(record ? "recorded runs" : "host-issued runs");
    OpRunner cpu_run(c, Device::CPU, dtype), gpu_run(c, Device::CUDA, dtype);
    gpu_run.set_recording(record);
    for (bool first : {true, false}) {
      SCOPED_TRACE(first ? "one run" : "second run accumulates");
      const OpResult cpu = cpu_run.run(first), gpu = gpu_run.run(first);
      EXPECT_NEAR(gpu.loss_sum, cpu.loss_sum, tolerance * std::max(1.0, std::fabs(cpu.loss_sum)));
      EXPECT_LE(test::relative_error(gpu.dx, cpu.dx), tolerance) << "input gradient";
      EXPECT_LE(test::relative_error(gpu.grads, cpu.grads), tolerance) << "parameter gradients";
    }
    EXPECT_EQ(gpu_run.recording(), record) << "a step refused capture";
  }
}

class OpParity : public ::testing::TestWithParam<test::OpCase> {};

TEST_P(OpParity, CpuVsCuda) {
  CRUMB_REQUIRE_GPU();
  for (DType dtype : dtypes_on(Device::CUDA)) {
    SCOPED_TRACE(dtype_name(dtype));
    check_parity(GetParam(), dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(, OpParity, ::testing::ValuesIn(test::op_cases()), test::op_case_name);

// ---- OpAccumulate: with the gradient buffers and the arena full of garbage, a batch's first micro-batch
// must overwrite them (the same results as a run on clean buffers), and a second one (first_micro_batch
// = false) must add exactly: twice the parameter gradients and the loss, the same input gradient. The
// parameter gradients of a 16-bit graph are float32 sums too: they must not come out rounded to 16 bits.

void check_accumulation(const test::OpCase& c, Device device, DType dtype) {
  OpRunner r(c, device, dtype);
  const OpResult clean = r.run(true);
  if (is_half(dtype) && !clean.grads.empty()) {
    // A float32 sum of products of 16-bit values is a 16-bit value by chance only (a sum of few terms
    // more often: up to a quarter of a case's gradients), a rounded one always.
    std::size_t nonzero = 0, representable = 0;
    for (float v : clean.grads)
      if (v != 0) {
        ++nonzero;
        representable += test::round_to(dtype, v) == v;
      }
    EXPECT_LT(representable * 2, nonzero) << "of the parameter gradients, " << representable << " of " << nonzero
                                          << " are " << dtype_name(dtype) << " values";
  }
  // NaN shows any arithmetic read of the old contents, even 0 * old; a huge finite value shows the
  // reads NaN slips through (fmax/fmin ignore a NaN operand).
  for (bool nan : {true, false}) {
    SCOPED_TRACE(nan ? "buffers full of NaN" : "buffers full of huge values");
    r.fill_with(nan);
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

void check_accumulation(const test::OpCase& c, Device device) {
  for (DType dtype : dtypes_on(device)) {
    SCOPED_TRACE(dtype_name(dtype));
    check_accumulation(c, device, dtype);
  }
}

TEST_P(OpAccumulate, Cpu) { check_accumulation(GetParam(), Device::CPU); }
TEST_P(OpAccumulate, Cuda) {
  CRUMB_REQUIRE_GPU();
  check_accumulation(GetParam(), Device::CUDA);
}

INSTANTIATE_TEST_SUITE_P(, OpAccumulate, ::testing::ValuesIn(test::op_cases()), test::op_case_name);

}  // namespace
}  // namespace crumb
