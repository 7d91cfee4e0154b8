// What the kernel benchmarks run: one Case per distinct kernel call of a reference model's training step
// (forward, backward and the optimizer), read off the model's real graph after autograd, so the shapes
// are the engine's own and cannot drift from the models; plus a few of DeepBench's training-set shapes.
// Shared by the CPU and CUDA benchmarks, which also share the work model (flops / bytes) below.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "kernels/cpu/shapes.h"
#include "kernels/dropout_mask.h"

namespace crumb::bench {

// The value of element i of every benchmark operand: in [-0.5, 0.5), deterministic, so no kernel meets
// NaN, infinity or denormals and every run does the same work.
inline float operand_value(std::size_t i) { return static_cast<float>((i * 7919 % 1000) / 1000.0 - 0.5); }

// Every kernel a training step calls. The graph ops map onto the first ones; the last four run over
// the whole flat parameter block once per batch.
enum class Kernel {
  Conv2dFwd, Conv2dBwdData, Conv2dBwdWeight,
  LinearFwd, LinearBwdData, LinearBwdWeight,
  MaxPoolFwd, MaxPoolBwd, AvgPoolFwd, AvgPoolBwd, GlobalAvgPoolFwd, GlobalAvgPoolBwd,
  AdaptiveAvgPoolFwd, AdaptiveAvgPoolBwd,
  BatchNormFwd, BatchNormBwd, GroupNormFwd, GroupNormBwd,
  ReluFwd, ReluBwd, DropoutFwd, DropoutBwd, Add,
  SoftmaxXentFwd, SoftmaxXentBwd,
  SgdStep, AdamWStep, CountNonfinite, CopyAccumulate,
};
const char* kernel_name(Kernel k);
// Conv and linear are GEMM-like (judged in FLOP/s against the GEMM ceiling); everything else streams
// memory (judged in bytes/s against the bandwidth ceiling).
bool compute_bound(Kernel k);

struct LinearShape {  // x [n, in], w [out, in]
  int n, in, out;
};
struct GlobalPoolShape {  // x [n, c, hw]
  int n, c, hw;
};
struct SamplesShape {  // x [n, per_sample]: dropout draws each sample's mask from its own stream
  int n;
  int64_t per_sample;
};
struct ClassesShape {  // logits [n, k]
  int n, k;
};
struct Elements {  // a flat loop over count elements
  int64_t count;
};
// The kernel's shape at the case's batch (n is the batch, never the per-sample 1 of the graph).
using Shape = std::variant<cpu::Conv2dShape, cpu::Pool2dShape, cpu::AdaptivePool2dShape, cpu::BatchNormShape,
                           cpu::GroupNormShape, LinearShape, GlobalPoolShape, SamplesShape, ClassesShape, Elements>;

// The dropout kernels' arguments in every benchmark: a fixed batch key and layer (the mask is a hash of
// them, so any one does the same work) and p = 0.5, torchvision's default and vgg11_bn's.
struct DropoutArgs {
  RandomKey key;
  uint64_t layer;
  uint32_t threshold;
  float scale;
};
DropoutArgs dropout_args();

struct Case {
  Kernel kernel;
  std::string suite;  // the model and its input ("resnet50_224"), or "deepbench"
  std::string layer;  // the first layer of the suite with this shape (its graph name)
  Shape shape;
  bool bias = false;  // conv/linear: the layer has a bias (its forward adds it, its weight backward sums it)
  int layers = 1;     // calls of this exact kernel and shape in one training step of the suite

  // The benchmark's name: kernel/suite/layer.
  std::string name() const;
  // The shape in words, e.g. "x[8,64,56,56] w[64,64,3,3] s1 p1": the benchmark's label.
  std::string describe() const;
  // Floating-point operations of one call (GEMM-like kernels; multiply and add count as two).
  double flops() const;
  // Bytes one call must move at least: every tensor it reads or writes, once (float32, 1-byte argmax).
  // Kernels that take several passes over a tensor move more, so their % of bandwidth stays below 100.
  double bytes() const;
};

struct Suite {
  std::string name;   // as in Case::suite
  std::string model;  // the model it builds (registry name; empty for DeepBench)
  int channels, height, width, classes, batch;
};
// The suites in run order: lenet5, cnn, resnet20, resnet50 at 224x224, vgg11_bn at 32x32 and 224x224,
// deepbench.
const std::vector<Suite>& suites();

// The distinct kernel calls of one training step of a suite, in graph order (the optimizer last).
std::vector<Case> cases(const Suite& suite);

}  // namespace crumb::bench
