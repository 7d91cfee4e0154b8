// The engine on CUDA against the engine on the CPU: whole training steps of the reference models,
// micro-batch equivalence on the device, recorded runs, TF32, and no device allocation in the training
// loop (every op on its own: tests/ops_test.cc). The GPU tests skip without a usable device; the
// error-path tests run everywhere, in CPU-only builds too.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/device/backend.h"
#include "engine/device/buffer.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/base/error.h"
#include "engine/run/executor.h"
#include "engine/optim/optimizer.h"
#include "engine/train/scheduler.h"
#include "engine/ops/norm.h"
#include "engine/plan/layout.h"
#include "engine/train/model_registry.h"
#include "tests/batch_outcome.h"
#include "tests/test_util.h"
#include "tests/trained_model.h"

namespace crumb {
namespace {

using Floats = std::vector<float>;
using test::relative_error;
constexpr double kTolerance = test::kParityTolerance;

// ---- whole models through the scheduler and optimizer

// One batch of 29 synthetic samples in pinned memory (as the training tool hands them to a GPU).
struct OneBatch {
  data::Loader loader{synthetic_dataset(), 29, {0.5f, 0.25f}, data::LoaderOptions::shuffled(9).in(Memory::Pinned)};
  data::Batch b;
  OneBatch() {
    loader.start_epoch(0);
    EXPECT_TRUE(loader.next(b));
  }
};

TEST(CudaEngine, TrainingStepMatchesCpu) {
  CRUMB_REQUIRE_GPU();
  OneBatch one;
  for (const char* name : {"lenet5", "cnn", "mlp"}) {
    for (int m : {29, 7}) {
      SCOPED_TRACE(std::string(name) + " m=" + std::to_string(m));
      TrainedModel cpu(name, m, 4, Device::CPU), gpu(name, m, 4, Device::CUDA);
      ASSERT_EQ(cpu.weights(), gpu.weights());  // same initialisation on both devices
      for (int step = 0; step < 2; ++step) {
        const BatchResult rc = cpu.sched.train_batch({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
        const BatchResult rg = gpu.sched.train_batch({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
        EXPECT_NEAR(rg.loss_sum, rc.loss_sum, kTolerance * rc.loss_sum);
        EXPECT_EQ(rg.micro_batches, rc.micro_batches);
        EXPECT_LE(relative_error(gpu.grads(), cpu.grads()), kTolerance) << "step " << step;
        cpu.opt->step();
        gpu.opt->step();
        EXPECT_LE(relative_error(gpu.weights(), cpu.weights()), kTolerance) << "step " << step;
      }
      const BatchResult ec = cpu.sched.evaluate({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
      const BatchResult eg = gpu.sched.evaluate({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
      EXPECT_NEAR(eg.loss_sum, ec.loss_sum, kTolerance * ec.loss_sum);
      EXPECT_NEAR(double(eg.correct), double(ec.correct), 1.0);  // a near-tie may flip one sample
    }
  }
}

// Normalisation through the scheduler on the device: resnet20 with BatchNorm over groups of 8 (deferred and
// per-group running statistics) and with GroupNorm, in one micro-batch and in micro-batches of 16 (a
// ragged last one of 12): the CPU's loss, gradients, running statistics and num_batches_tracked.
TEST(CudaEngine, NormalisedResnetMatchesCpu) {
  CRUMB_REQUIRE_GPU();
  std::vector<models::NormSpec> norms(3);
  norms[0].bn.group = 8;
  norms[1].bn.group = 8;
  norms[1].bn.stats = BnStats::PerGroup;
  norms[2].kind = models::NormSpec::Kind::Group;
  for (std::size_t k = 0; k < norms.size(); ++k) {
    Graph g = models::build("resnet20", {3, 8, 8, 5, norms[k]});
    build_backward(g);
    for (int m : {44, 16}) {
      SCOPED_TRACE("norm " + std::to_string(k) + " m=" + std::to_string(m));
      auto outcome = [&](Device device) { return test::run_one_batch(g, m, 44, 5, {}, device); };
      const test::BatchOutcome cpu = outcome(Device::CPU), gpu = outcome(Device::CUDA);
      EXPECT_NEAR(gpu.loss_sum, cpu.loss_sum, kTolerance * cpu.loss_sum);
      EXPECT_LE(relative_error(gpu.grads, cpu.grads), kTolerance) << "parameter gradients";
      EXPECT_LE(relative_error(gpu.state, cpu.state), kTolerance) << "running statistics";
      EXPECT_EQ(gpu.tracked, cpu.tracked) << "num_batches_tracked";
    }
  }
}

// Graph::deterministic (--deterministic) keeps cuDNN's deterministic algorithms only, and every Crumb
// kernel reduces in a fixed order, so two runs of the same batch give the same gradient and running-
// statistics bits (only the reported loss sum adds with atomics), in NCHW and in channels-last (whose
// backward-filter pass writes dw through the workspace).
TEST(CudaEngine, DeterministicRunsRepeatTheirBits) {
  CRUMB_REQUIRE_GPU();
  for (bool nhwc : {false, true}) {
    SCOPED_TRACE(nhwc ? "channels-last" : "NCHW");
    models::NormSpec norm;
    norm.bn.group = 8;
    Graph g = models::build("resnet20", {3, 8, 8, 5, norm});
    build_backward(g);
    if (nhwc) to_channels_last(g);
    g.set_deterministic(true);
    auto outcome = [&] { return test::run_one_batch(g, 16, 44, 5, {}, Device::CUDA); };
    const test::BatchOutcome a = outcome(), b = outcome();
    EXPECT_EQ(a.grads, b.grads);
    EXPECT_EQ(a.state, b.state);
    EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-12 * a.loss_sum);
  }
}

// The micro-batch equivalence of tests/training_test.cc, on the device: m in {1, 3, 7} against m = 29.
TEST(CudaEngine, MicroBatchGradientsEqualFullBatch) {
  CRUMB_REQUIRE_GPU();
  OneBatch one;
  for (const char* name : {"lenet5", "cnn", "mlp"}) {
    TrainedModel full(name, 29, 4, Device::CUDA);
    full.sched.train_batch({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
    const Floats ref = full.grads();
    for (int m : {1, 3, 7}) {
      TrainedModel micro(name, m, 4, Device::CUDA);
      // Garbage in the gradients must be overwritten by the first micro-batch, not added to. Only the
      // parameters' own elements: the padding between them is never written and stays zero (as in ref).
      for (ValueId p : micro.g.params())
        std::fill_n(static_cast<float*>(micro.params.grad(p)), micro.g.value(p).count(1), 123.0f);
      copy_bytes(micro.params.device_grad_block(), Memory::Cuda, micro.params.grad_block(), Memory::Host,
                 micro.params.bytes());
      const BatchResult r = micro.sched.train_batch({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
      EXPECT_EQ(r.micro_batches, (29 + m - 1) / m);
      // DESIGN.md's 1e-5 is the CPU's bound; on the device cuDNN may also pick a different algorithm
      // (summation order) for each micro-batch size, so the bound is the CPU-vs-CUDA one.
      EXPECT_LE(relative_error(micro.grads(), ref), kTolerance) << name << " m=" << m;
    }
  }
}

// Replayed CUDA graphs do what running every step from the host does: the same losses, gradients and
// weights over steps of full, ragged and accumulating micro-batches, and the same evaluation.
TEST(CudaEngine, RecordedRunsMatchHostRuns) {
  CRUMB_REQUIRE_GPU();
  OneBatch one;
  for (const char* name : {"lenet5", "cnn"}) {
    SCOPED_TRACE(name);
    TrainedModel host(name, 10, 4, Device::CUDA), replayed(name, 10, 4, Device::CUDA);  // 29 = 10 + 10 + 9
    host.sched.set_recording(false);
    EXPECT_FALSE(host.sched.train_executor().recording());
    for (int step = 0; step < 3; ++step) {
      const BatchResult rh = host.sched.train_batch({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
      const BatchResult rr = replayed.sched.train_batch({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
      ASSERT_TRUE(replayed.sched.train_executor().recording()) << "a capture failed and runs fell back to the host";
      // cuDNN's backward-filter algorithms may add in a different order from run to run.
      EXPECT_NEAR(rr.loss_sum, rh.loss_sum, 1e-5 * rh.loss_sum) << "step " << step;
      EXPECT_EQ(rr.correct, rh.correct) << "step " << step;
      EXPECT_LE(relative_error(replayed.grads(), host.grads()), 1e-5) << "step " << step;
      host.opt->step();
      replayed.opt->step();
    }
    EXPECT_LE(relative_error(replayed.weights(), host.weights()), 1e-5);
    const BatchResult eh = host.sched.evaluate({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
    const BatchResult er = replayed.sched.evaluate({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
    EXPECT_TRUE(replayed.sched.eval_executor().recording());
    EXPECT_NEAR(er.loss_sum, eh.loss_sum, 1e-5 * eh.loss_sum);
  }
}

// --tf32 lets cuBLAS and cuDNN round float32 operands to TF32 (10-bit mantissa): a step stays within that
// rounding of the float32 step, so training follows the same course.
TEST(CudaEngine, Tf32StepIsCloseToFloat32) {
  CRUMB_REQUIRE_GPU();
  OneBatch one;
  for (const char* name : {"lenet5", "cnn", "mlp"}) {
    SCOPED_TRACE(name);
    TrainedModel fp32(name, 29, 4, Device::CUDA), tf32(name, 29, 4, Device::CUDA, /*tf32=*/true);
    const BatchResult rf = fp32.sched.train_batch({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
    const BatchResult rt = tf32.sched.train_batch({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
    EXPECT_NEAR(rt.loss_sum, rf.loss_sum, 1e-2 * rf.loss_sum);
    EXPECT_LE(relative_error(tf32.grads(), fp32.grads()), 3e-2);
  }
}

TEST(CudaEngine, TrainingLoopAllocatesNothing) {
  CRUMB_REQUIRE_GPU();
  OneBatch one;
  for (const char* name : {"lenet5", "cnn"}) {
    TrainedModel r(name, 10, 4, Device::CUDA);  // 29 = 10 + 10 + 9: a ragged last micro-batch too
    r.sched.train_batch({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);  // warm-up: pointer resolution, lazy module loads
    r.opt->step();
    r.sched.evaluate({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
    // Free memory is a device-wide figure: run this test alone on its GPU (tools/bench/gpu.sh runs the
    // CUDA tests one at a time). Host allocations are not counted here: cuDNN 9's legacy convolution
    // calls allocate host memory internally; the engine's own loop is checked on the CPU
    // (tests/training_test.cc, Training.StepDoesNotAllocate).
    const std::size_t free_before = backend(Device::CUDA).free_bytes();
    for (int i = 0; i < 3; ++i) {
      r.sched.train_batch({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
      r.opt->step();
      r.sched.evaluate({{"x", one.b.x}, {"y", one.b.y}}, one.b.size);
    }
    EXPECT_EQ(backend(Device::CUDA).free_bytes(), free_before) << name << ": device memory was allocated";
  }
}

// Micro-batches streamed from pinned loader slots (the host waits for each copy before the loader reuses
// a slot) train on the GPU as whole pinned batches sliced by the scheduler: within cuDNN's run-to-run
// rounding (RecordedRunsMatchHostRuns); a slot overwritten too early would feed other samples.
TEST(CudaEngine, StreamedMicroBatchesTrainLikeWholeBatches) {
  CRUMB_REQUIRE_GPU();
  for (int m : {29, 6}) {
    TrainedModel whole("lenet5", m, 4, Device::CUDA), streamed("lenet5", m, 4, Device::CUDA);
    data::Loader a(synthetic_dataset(), 29, {0.5f, 0.25f}, data::LoaderOptions::shuffled(9).in(Memory::Pinned));
    data::Loader b(synthetic_dataset(), 29, {0.5f, 0.25f}, data::LoaderOptions::shuffled(9).in(Memory::Pinned));
    b.set_micro_batch(m);
    a.start_epoch(0);
    b.start_epoch(0);
    data::Batch wb, sb;
    for (int step = 0; step < 4; ++step) {
      ASSERT_TRUE(a.next(wb) && b.next(sb));
      const double lw = whole.sched.train_batch({{"x", wb.x}, {"y", wb.y}}, wb.size).loss_sum;
      EXPECT_NEAR(streamed.sched.train_batch(b, sb.size).loss_sum, lw, 1e-5 * lw) << "m " << m;
      whole.opt->step();
      streamed.opt->step();
    }
    EXPECT_LE(relative_error(streamed.weights(), whole.weights()), 1e-5) << "m " << m;
  }
}

// ---- error paths, on every machine

TEST(CudaEngine, NoDeviceIsAOneLineError) {
  if (device_available(Device::CUDA)) {
    GTEST_SKIP() << "a CUDA device is usable here";
  }
  for (Memory kind : {Memory::Cuda, Memory::Pinned}) {
    try {
      Buffer b(1024, kind);
      ADD_FAILURE() << "allocated device memory without a device";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("--device cpu"), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  }
  Graph g = TrainedModel::build_graph("mlp");
  EXPECT_THROW(ParamStore(g, Device::CUDA), Error);
  EXPECT_THROW(Arena(Device::CUDA).reserve(1024), Error);
}

// Devices are numbered: the CPU is device 0 only, and a device that is not there is one error naming it
// (and --device cpu), from the factory, the parameter store and the arena alike.
TEST(CudaEngine, DeviceIndexIsCarriedAndChecked) {
  Graph g = TrainedModel::build_graph("mlp");
  EXPECT_THROW(backend(Device::CPU, 1), Error);
  EXPECT_THROW(ParamStore(g, Device::CPU, 1), Error);
  const int missing = 64;  // no machine here has 65 GPUs
  try {
    ParamStore params(g, Device::CUDA, missing);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use --device cpu"), std::string::npos) << e.what();
    if (device_available(Device::CUDA)) {
      EXPECT_NE(std::string(e.what()).find("device 64"), std::string::npos);
    }
  }
  EXPECT_THROW(Arena(Device::CUDA, missing).reserve(256), Error);
  if (!device_available(Device::CUDA)) return;
  EXPECT_EQ(backend(Device::CUDA, 0).index(), 0);
  EXPECT_EQ(&backend(Device::CUDA, 0), &backend(Device::CUDA));  // one backend per device, kept
  ParamStore params(g, Device::CUDA, 0);
  Arena arena(Device::CUDA, 0);
  EXPECT_NO_THROW(Executor(g, params, arena, 4, Pass::Eval));
}

TEST(CudaEngine, DeviceMismatchIsAnError) {
  CRUMB_REQUIRE_GPU();
  Graph g = TrainedModel::build_graph("mlp");
  ParamStore params(g, Device::CUDA);
  Arena arena(Device::CPU);
  EXPECT_THROW(Executor(g, params, arena, 4, Pass::Train), Error);
}

TEST(CudaEngine, Float64GraphsAreRejected) {
  CRUMB_REQUIRE_GPU();
  Graph g = models::build("mlp", {1, 8, 8, 3}, DType::F64);
  build_backward(g);
  EXPECT_THROW(ParamStore(g, Device::CUDA), Error);
  try {
    compile_pass(g, Pass::Train, 4, Device::CUDA);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this device runs F32, F16, BF16 graphs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace crumb
