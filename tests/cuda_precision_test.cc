// Mixed precision on CUDA: which ops have native 16-bit rows (checked in every CUDA build, no device
// needed), and whole bf16 and fp16 training steps of the reference models on the device against the same
// precision on the CPU, whose 16-bit rows compute in float32 (docs/precision.md). The kernels one by
// one are in tests/cuda_kernels_test.cc (CudaHalf.*, CudaLibraryTest.*Half).
#if CRUMB_HAVE_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/graph/graph_ops.h"  // kAdd
#include "engine/graph/op.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/train/model_registry.h"
#include "tests/batch_outcome.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

// Every op of the reference models runs natively in 16 bits on CUDA but the convolution's weight
// gradient: cuDNN writes it in the operands' type, and parameter gradients must be float32, so that pass
// runs its float32 row on widened copies (engine/ops/conv2d.cc).
TEST(CudaPrecision, SixteenBitRowsAreNative) {
  const std::vector<const OpDef*> native = {
      &kLinear,        &kLinearBwdData,    &kLinearBwdWeight,   &kRelu,          &kReluBwd,
      &kAdd,           &kMaxPool2d,        &kMaxPool2dBwd,      &kAvgPool2d,     &kAvgPool2dBwd,
      &kGlobalAvgPool, &kGlobalAvgPoolBwd, &kAdaptiveAvgPool2d, &kAdaptiveAvgPool2dBwd,
      &kBatchNorm,     &kBatchNormBwd,     &kBatchNormApply,    &kGroupNorm,     &kGroupNormBwd,
      &kSoftmaxXent,   &kSoftmaxXentBwd,   &kDropout,           &kDropoutBwd,     &kLeakyRelu,
      &kLeakyReluBwd,  &kHardtanh,         &kHardtanhBwd,
#if CRUMB_HAVE_CUDNN
      &kConv2d,        &kConv2dBwdData,
#endif
  };
  for (DType dtype : {DType::BF16, DType::F16}) {
    for (const OpDef* op : native) {
      EXPECT_NE(impl_table().find(*op, Device::CUDA, dtype), nullptr) << op->name << " " << dtype_name(dtype);
      EXPECT_NE(impl_table().find(*op, Device::CUDA, DType::F32), nullptr) << op->name;
    }
    EXPECT_EQ(impl_table().find(kConv2dBwdWeight, Device::CUDA, dtype), nullptr) << dtype_name(dtype);
  }
#if CRUMB_HAVE_CUDNN
  EXPECT_NE(impl_table().find(kConv2dBwdWeight, Device::CUDA, DType::F32), nullptr);
#endif
}

// One training batch of lenet5 and of resnet20 (BatchNorm over groups of 8, two micro-batches) in bf16 and
// fp16 on the device against the CPU. The two differ where a sum rounds differently before its 16-bit
// store (cuBLAS and cuDNN add in their own orders; the CPU's kernels in theirs), and a value one rounding
// apart can switch a ReLU, whose effect BatchNorm then scales up: so the device's 16-bit gradients must be
// as close to the float32 graph's (on the CPU) as the CPU's 16-bit gradients are, within a factor of 2,
// rather than close to the CPU's own 16-bit run. Running statistics, the loss and num_batches_tracked are
// compared with the CPU's 16-bit run directly.
TEST(CudaPrecision, TrainingStepMatchesCpu) {
  CRUMB_REQUIRE_GPU();
  struct Case {
    const char* model;
    models::ModelSpec spec;
    int m, batch;
  };
  models::NormSpec norm;
  norm.bn.group = 8;
  const Case cases[] = {{"lenet5", {1, 28, 28, 10}, 32, 32}, {"resnet20", {3, 8, 8, 5, norm}, 16, 32}};
  for (DType dtype : {DType::BF16, DType::F16}) {
    // bf16 keeps 8 significant bits, fp16 11: their roundings differ by 8x.
    const double loss_tol = dtype == DType::BF16 ? 1e-2 : 2e-3;
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.model) + " " + dtype_name(dtype));
      Graph g = models::build(c.model, c.spec, dtype), g32 = models::build(c.model, c.spec, DType::F32);
      build_backward(g);
      build_backward(g32);
      const test::BatchOutcome cpu = test::run_one_batch(g, c.m, c.batch, c.spec.classes),
                               gpu = test::run_one_batch(g, c.m, c.batch, c.spec.classes, {}, Device::CUDA),
                               f32 = test::run_one_batch(g32, c.m, c.batch, c.spec.classes);
      EXPECT_NEAR(gpu.loss_sum, cpu.loss_sum, loss_tol * cpu.loss_sum);
      const double on_cpu = test::norm_error(cpu.grads, f32.grads), on_gpu = test::norm_error(gpu.grads, f32.grads);
      std::printf("%s %s: gradients against float32, normwise: CPU %.3g, CUDA %.3g; CUDA against the CPU, normwise "
                  "%.3g\n", c.model, dtype_name(dtype), on_cpu, on_gpu, test::norm_error(gpu.grads, cpu.grads));
      EXPECT_LE(on_gpu, 2 * on_cpu) << test::worst_parameters(g, gpu.grads, f32.grads);
      EXPECT_LE(test::relative_error(gpu.state, cpu.state), loss_tol) << "running statistics";
      EXPECT_EQ(gpu.tracked, cpu.tracked) << "num_batches_tracked";
    }
  }
}

}  // namespace
}  // namespace crumb

#endif  // CRUMB_HAVE_CUDA
