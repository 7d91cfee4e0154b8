// Channels-last plans (engine/plan/layout.h): the relayout kernels, where the rewrite puts the conversions,
// NHWC plans of cnn and resnet20 against their NCHW plans on the CPU (loss, gradients, running statistics,
// micro-batch invariance, one optimizer step and its checkpoint), and, on a GPU, an NHWC plan on CUDA
// against the CPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

#include "engine/device/widen.h"
#include "engine/graph/autograd.h"
#include "engine/graph/saved_values.h"
#include "engine/io/checkpoint.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/dropout.h"
#include "engine/ops/layout.h"
#include "engine/ops/norm.h"
#include "engine/ops/pool.h"
#include "engine/optim/optimizer.h"
#include "engine/plan/layout.h"
#include "engine/strategy/recompute.h"
#include "engine/strategy/swap.h"
#include "engine/train/model_registry.h"
#include "engine/train/trainer.h"
#include "kernels/convert.h"
#include "kernels/half.h"
#include "tests/batch_outcome.h"
#include "tests/ops/registry.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

// ---- the kernels

TEST(Relayout, MovesChannelsInnermostAndBack) {
  // Two blocks of 3 channels by 4 positions: NCHW element (n, c, s) is n * 12 + c * 4 + s.
  std::vector<float> nchw(24), nhwc(24), back(24);
  for (int i = 0; i < 24; ++i) nchw[i] = float(i);
  const ImageShape shape{2, 3, 4};
  cpu::relayout(nhwc.data(), DType::F32, nchw.data(), DType::F32, shape, Layout::NHWC);
  for (int n = 0; n < 2; ++n)
    for (int s = 0; s < 4; ++s)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(nhwc[n * 12 + s * 3 + c], float(n * 12 + c * 4 + s)) << n << c << s;
  cpu::relayout(back.data(), DType::F32, nhwc.data(), DType::F32, shape, Layout::NCHW);
  EXPECT_EQ(back, nchw);

  // Other dtypes move unchanged (the max pool's argmax); float dtypes convert and accumulate as convert().
  std::vector<uint8_t> bytes(24), moved(24);
  for (int i = 0; i < 24; ++i) bytes[i] = uint8_t(i);
  cpu::relayout(moved.data(), DType::U8, bytes.data(), DType::U8, shape, Layout::NHWC);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(moved[i], uint8_t(nhwc[i]));
  std::vector<bf16> half(24);
  cpu::relayout(half.data(), DType::BF16, nchw.data(), DType::F32, shape, Layout::NHWC);
  cpu::relayout(half.data(), DType::BF16, nchw.data(), DType::F32, shape, Layout::NHWC, /*accumulate=*/true);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(to_float(half[i]), 2 * nhwc[i]);
  EXPECT_NE(test::error_of([&] {
              cpu::relayout(moved.data(), DType::U8, bytes.data(), DType::U8, shape, Layout::NHWC, true);
            }),
            "no error");
}

// ---- the rewrite

constexpr int kClasses = 5;

Graph built(const std::string& model, int channels, DType dtype, bool nhwc) {
  models::NormSpec norm;
  norm.bn.group = 8;
  Graph g = models::build(model, {channels, 8, 8, kClasses, norm}, dtype);
  build_backward(g);
  if (nhwc) to_channels_last(g);
  return g;
}

struct Conversions {
  int activations = 0, filters = 0, to_nchw = 0, backward = 0;
};

// Counts g's conversions, checking the invariant the rows rely on: every node's image inputs and outputs
// are in its layout (or their two layouts are the same bytes), conversions excepted.
Conversions check_layouts(const Graph& g) {
  Conversions c;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.def == &kToNhwc || n.def == &kToNchw) {
      const Value& x = g.value(n.in[0]);
      EXPECT_NE(x.layout, n.layout) << n.name;
      EXPECT_EQ(g.value(n.out[0]).layout, n.layout) << n.name;
      // A conversion sits at a region's edge: what it converts was not made by a node of its own layout.
      if (x.producer >= 0) {
        EXPECT_NE(g.node(x.producer).layout, n.layout) << n.name;
      }
      c.to_nchw += n.def == &kToNchw;
      c.backward += n.backward;
      (x.batched ? c.activations : c.filters) += n.def == &kToNhwc;
      continue;
    }
    if (n.def->layouts != Layouts::Any) {
      EXPECT_EQ(n.layout, n.def->layouts == Layouts::Nhwc ? Layout::NHWC : Layout::NCHW) << n.name;
    }
    for (const auto* list : {&n.in, &n.out})
      for (ValueId v : *list) {
        const Value& x = g.value(v);
        if (x.batched && is_image(x) && !layout_free(x)) {
          EXPECT_EQ(x.layout, n.layout) << n.name << " " << x.name;
        }
      }
    if (n.def == &kConv2d || n.def == &kConv2dBwdData) {
      EXPECT_TRUE(g.value(n.in[1]).layout == Layout::NHWC || layout_free(g.value(n.in[1]))) << n.name;
    }
  }
  for (ValueId p : g.params()) {
    EXPECT_EQ(g.value(p).layout, Layout::NCHW) << g.value(p).name;
    EXPECT_EQ(g.value(g.value(p).grad).layout, Layout::NCHW) << g.value(p).name;
  }
  return c;
}

// Convolutions whose filter has two layouts (1x1 filters [K, C, 1, 1] have one).
int count_convs(const Graph& g) {
  int n = 0;
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    n += g.node(i).def == &kConv2d && !layout_free(g.value(g.node(i).in[1]));
  return n;
}

// resnet20 is one region from the input to global average pooling, whose 1x1 output needs no conversion:
// one conversion of the input (3 channels) and one per convolution's filter but the 1x1 shortcuts', all
// in the forward pass.
TEST(ChannelsLast, Resnet20IsOneRegion) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    const Graph g = built("resnet20", 3, dtype, true);
    const Conversions c = check_layouts(g);
    EXPECT_EQ(c.activations, 1) << dtype_name(dtype);
    EXPECT_EQ(c.filters, count_convs(g));
    EXPECT_EQ(c.to_nchw, 0);
    EXPECT_EQ(c.backward, 0);
    // In bf16 the input is converted after its cast, in 16 bits.
    for (NodeId i = 0; i < g.num_nodes(); ++i)
      if (g.node(i).def == &kToNhwc && g.value(g.node(i).in[0]).batched) {
        EXPECT_EQ(g.value(g.node(i).in[0]).dtype, dtype);
      }
  }
}

// cnn's region ends at the flatten before its linear layers: a conversion to NCHW there and its gradient's
// back to NHWC in the backward pass. Its one-channel input needs none, nor its first filter [32, 1, 3, 3].
TEST(ChannelsLast, CnnConvertsBeforeFlatten) {
  const Graph g = built("cnn", 1, DType::F32, true);
  const Conversions c = check_layouts(g);
  EXPECT_EQ(c.activations, 1);  // the flattened gradient, in the backward pass
  EXPECT_EQ(c.to_nchw, 1);
  EXPECT_EQ(c.backward, 1);
  EXPECT_EQ(c.filters, 1);
}

TEST(ChannelsLast, OffLeavesTheGraphAlone) {
  const Graph g = built("resnet20", 3, DType::BF16, false);
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    EXPECT_EQ(g.node(i).layout, Layout::NCHW);
    EXPECT_NE(g.node(i).def, &kToNhwc);
    EXPECT_NE(g.node(i).def, &kToNchw);
  }
  Graph twice = built("resnet20", 3, DType::BF16, true);
  EXPECT_NE(test::error_of([&] { to_channels_last(twice); }).find("channels-last plan already"), std::string::npos);
}

// auto: on for 16-bit precisions on CUDA only; plan_run applies it.
TEST(ChannelsLast, AutoIsOnFor16BitOnCuda) {
  TrainConfig c;
  for (Precision p : {Precision::FP32, Precision::TF32, Precision::BF16, Precision::FP16}) {
    c.precision = p;
    c.channels_last = ChannelsLast::Auto;
    EXPECT_EQ(uses_channels_last(c, Device::CUDA), p == Precision::BF16 || p == Precision::FP16);
    EXPECT_FALSE(uses_channels_last(c, Device::CPU));
    c.channels_last = ChannelsLast::On;
    EXPECT_TRUE(uses_channels_last(c, Device::CPU));
    c.channels_last = ChannelsLast::Off;
    EXPECT_FALSE(uses_channels_last(c, Device::CUDA));
  }
  c.model = "resnet20";
  c.precision = Precision::BF16;
  c.norm.bn.group = 8;
  c.memory_budget = std::size_t{1} << 30;
  for (ChannelsLast cl : {ChannelsLast::Auto, ChannelsLast::On}) {
    c.channels_last = cl;
    const RunPlan p = plan_run(c, {3, 8, 8, kClasses}, 16, Device::CPU);
    int conversions = 0;
    for (NodeId i = 0; i < p.graph.num_nodes(); ++i) conversions += p.graph.node(i).def == &kToNhwc;
    EXPECT_EQ(conversions > 0, cl == ChannelsLast::On);
  }
}

// ---- NHWC plans against NCHW plans on the CPU

// The CPU's rows compute NHWC nodes on NCHW copies (engine/device/widen.h) and the conversions move
// values exactly, so an NHWC plan gives the NCHW plan's bits (loss, gradients, running statistics) at
// every micro-batch size: micro-batching changes it exactly as it changes the NCHW plan, by float32
// reordering of the weight gradients' sums. (On CUDA, cuDNN's NHWC kernels add in their own order:
// CudaChannelsLast below.)
TEST(ChannelsLast, PlansMatchNchwOnTheCpu) {
  for (const char* model : {"cnn", "resnet20"})
    for (DType dtype : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(model) + " " + dtype_name(dtype));
      const Graph nchw = built(model, 3, dtype, false), nhwc = built(model, 3, dtype, true);
      const test::BatchOutcome whole = test::run_one_batch(nhwc, 40, 40, kClasses);
      for (int m : {8, 16, 40}) {
        const test::BatchOutcome a = test::run_one_batch(nchw, m, 40, kClasses),
                                 b = test::run_one_batch(nhwc, m, 40, kClasses);
        EXPECT_EQ(b.loss_sum, a.loss_sum) << "m " << m;
        test::expect_same(b.grads, a.grads, "gradients at m " + std::to_string(m));
        test::expect_same(b.state, a.state, "running statistics at m " + std::to_string(m));
        EXPECT_EQ(b.tracked, a.tracked);
        EXPECT_LE(test::relative_error(b.grads, whole.grads), 1e-5) << "m " << m;
      }
    }
}

// The memory strategies rewrite NHWC plans as they rewrite NCHW ones: recomputing every recomputable
// value (convolutions, conversions and BatchNorm included) and swapping every saved one (conversions'
// outputs and the filters' copies among them) leave the NCHW plan's bits.
TEST(ChannelsLast, SwapAndRecomputeKeepTheResult) {
  const Graph nchw = built("resnet20", 3, DType::BF16, false);
  const test::BatchOutcome want = test::run_one_batch(nchw, 8, 16, kClasses);
  Graph recomputed = built("resnet20", 3, DType::BF16, true);
  std::vector<ValueId> all;
  for (const SavedValue& s : saved_values(recomputed))
    if (recomputable(recomputed, s.value)) all.push_back(s.value);
  ASSERT_GT(recompute(recomputed, all), 0);
  Graph swapped = built("resnet20", 3, DType::BF16, true);
  ASSERT_FALSE(swap(swapped, test::all_saved(swapped), 8, test::swap_window(std::size_t{1} << 20)).swapped.empty());
  for (const Graph* g : {&recomputed, &swapped}) {
    check_layouts(*g);
    const test::BatchOutcome got = test::run_one_batch(*g, 8, 16, kClasses);
    EXPECT_EQ(got.loss_sum, want.loss_sum);
    test::expect_same(got.grads, want.grads, "gradients");
    test::expect_same(got.state, want.state, "running statistics");
  }
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// One SGD step in each layout: the same weights, and the same checkpoint file (PyTorch's NCHW names and
// shapes), byte for byte.
TEST(ChannelsLast, OneStepSavesTheSameCheckpoint) {
  const std::string dir = testing::TempDir() + "crumb_layout_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::string files[2];
  for (int nhwc = 0; nhwc < 2; ++nhwc) {
    files[nhwc] = dir + (nhwc ? "/nhwc.safetensors" : "/nchw.safetensors");
    TrainConfig c;
    c.model = "resnet20";
    c.device = Device::CPU;
    c.precision = Precision::BF16;
    c.batch = 32;
    c.micro_batch = 16;
    c.seed = 5;
    c.optimizer = OptimizerConfig{};
    c.optimizer.lr = 0.1;
    c.optimizer.momentum = 0.9;
    c.save = files[nhwc];
    const Graph g = built("resnet20", 3, DType::BF16, nhwc);
    Trainer t(c, g, test::random_batch(g, 32, kClasses));
    EXPECT_EQ(t.fit().steps, 1);
  }
  const std::string a = file_bytes(files[0]), b = file_bytes(files[1]);
  EXPECT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == b) << "the checkpoints differ";
  EXPECT_TRUE(file_bytes(optimizer_path(files[0])) == file_bytes(optimizer_path(files[1])));
  std::filesystem::remove_all(dir);
}

// ---- on a GPU

#if CRUMB_HAVE_CUDA
// Which CUDA rows take NHWC themselves (checked in every CUDA build, no device needed): cuDNN's
// convolutions, BatchNorm and pooling; GroupNorm, global average pooling and dropout run on NCHW copies.
// The CPU's rows all run on NCHW copies.
TEST(CudaChannelsLast, NativeNhwcRows) {
  std::vector<const OpDef*> native = {&kBatchNorm, &kBatchNormBwd, &kBatchNormApply, &kMaxPool2d, &kMaxPool2dBwd,
                                      &kAvgPool2d, &kAvgPool2dBwd, &kAdaptiveAvgPool2d, &kAdaptiveAvgPool2dBwd};
#if CRUMB_HAVE_CUDNN
  native.insert(native.end(), {&kConv2d, &kConv2dBwdData});
  ASSERT_NE(impl_table().find(kConv2dBwdWeight, Device::CUDA, DType::F32), nullptr);
  EXPECT_TRUE(impl_table().find(kConv2dBwdWeight, Device::CUDA, DType::F32)->nhwc);
#endif
  for (DType dtype : {DType::F32, DType::BF16, DType::F16})
    for (const OpDef* op : native) {
      ASSERT_NE(impl_table().find(*op, Device::CUDA, dtype), nullptr) << op->name;
      EXPECT_TRUE(impl_table().find(*op, Device::CUDA, dtype)->nhwc) << op->name << " " << dtype_name(dtype);
      EXPECT_FALSE(impl_table().find(*op, Device::CPU, DType::F32)->nhwc) << op->name;
    }
  for (const OpDef* op : {&kGroupNorm, &kGroupNormBwd, &kGlobalAvgPool, &kGlobalAvgPoolBwd, &kDropout, &kDropoutBwd})
    EXPECT_FALSE(impl_table().find(*op, Device::CUDA, DType::F32)->nhwc) << op->name;
}

// An NHWC plan on CUDA (cuDNN's channels-last convolutions, BatchNorm and pooling on NHWC memory, the
// relayout kernel) against the same plan on the CPU, which gives the NCHW plan's bits (above). float32:
// within 1e-3 normwise of the CPU's run or of one of its near-tie runs (test::near_tie_outcome: the
// H100 landed 0.0082 away, exactly a ReLU's step that 1e-7 perturbations give on the CPU); 16 bits: as
// close to the float32 plan's gradients (on the CPU) as the CPU's own 16-bit run is, within a factor of 2
// (CudaPrecision.TrainingStepMatchesCpu's rule). Prints the measured distances, and the parameters that
// differ most where a bound fails.
TEST(CudaChannelsLast, TrainingStepMatchesCpu) {
  CRUMB_REQUIRE_GPU();
  const Graph g32 = built("resnet20", 3, DType::F32, true);
  const test::BatchOutcome f32 = test::run_one_batch(g32, 16, 32, kClasses);
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double loss_tol = dtype == DType::BF16 ? 1e-2 : dtype == DType::F16 ? 2e-3 : 1e-4;
    const Graph g = built("resnet20", 3, dtype, true);
    const test::BatchOutcome cpu = dtype == DType::F32 ? f32 : test::run_one_batch(g, 16, 32, kClasses),
                             gpu = test::run_one_batch(g, 16, 32, kClasses, {}, Device::CUDA);
    EXPECT_NEAR(gpu.loss_sum, cpu.loss_sum, loss_tol * cpu.loss_sum);
    const double grads = test::norm_error(gpu.grads, cpu.grads), on_cpu = test::norm_error(cpu.grads, f32.grads),
                 on_gpu = test::norm_error(gpu.grads, f32.grads);
    std::printf("resnet20 NHWC %s: gradients on CUDA against the CPU, normwise %.3g; against float32: CPU %.3g, "
                "CUDA %.3g\n", dtype_name(dtype), grads, on_cpu, on_gpu);
    if (dtype == DType::F32) {
      double nearest = grads;
      for (unsigned s = 1; s <= 8 && nearest > 1e-3; ++s)
        nearest = std::min(nearest, test::norm_error(gpu.grads, test::near_tie_outcome(g, 16, 32, kClasses, s).grads));
      std::printf("resnet20 NHWC F32: nearest near-tie CPU outcome %.3g\n", nearest);
      EXPECT_LE(nearest, 1e-3) << test::worst_parameters(g, gpu.grads, cpu.grads);
    } else {
      EXPECT_LE(on_gpu, 2 * on_cpu) << test::worst_parameters(g, gpu.grads, f32.grads);
    }
    EXPECT_LE(test::relative_error(gpu.state, cpu.state), loss_tol) << "running statistics";
    EXPECT_EQ(gpu.tracked, cpu.tracked);
  }
}

// The relayout kernel against the CPU's, every dtype pair it takes, with accumulation.
TEST(CudaChannelsLast, RelayoutMatchesCpu) {
  CRUMB_REQUIRE_GPU();
  Backend& gpu = backend(Device::CUDA);
  const ImageShape shape{3, 5, 7};
  const std::size_t count = shape.count();
  const std::vector<float> x = test::random_floats(count, 1);
  for (Layout to : {Layout::NHWC, Layout::NCHW})
    for (bool accumulate : {false, true}) {
      std::vector<bf16> want(count), got(count);
      for (std::size_t i = 0; i < count; ++i) want[i] = to_bf16(float(i));
      got = want;
      cpu::relayout(want.data(), DType::BF16, x.data(), DType::F32, shape, to, accumulate);
      void* d_x = gpu.allocate(gpu.memory(), count * 4);
      void* d_y = gpu.allocate(gpu.memory(), count * 2);
      gpu.upload(d_x, x.data(), count * 4);
      gpu.upload(d_y, got.data(), count * 2);
      gpu.relayout(d_y, DType::BF16, d_x, DType::F32, shape, to, accumulate);
      gpu.read_back(got.data(), d_y, count * 2);
      gpu.synchronize();
      gpu.release(gpu.memory(), d_x);
      gpu.release(gpu.memory(), d_y);
      for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(got[i].bits, want[i].bits) << i;
    }
}
#endif  // CRUMB_HAVE_CUDA

}  // namespace
}  // namespace crumb
