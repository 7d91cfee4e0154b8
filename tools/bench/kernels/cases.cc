#include "tools/bench/kernels/cases.h"

#include <map>
#include <sstream>

#include "engine/graph/autograd.h"
#include "engine/base/error.h"
#include "engine/graph/op.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "models/registry.h"

namespace crumb::bench {
namespace {

constexpr double kFloat = sizeof(float);

// The graph ops that run a kernel, and which. Views (reshape) run none.
const std::pair<const OpDef*, Kernel> kOpKernels[] = {
    {&kConv2d, Kernel::Conv2dFwd},           {&kConv2dBwdData, Kernel::Conv2dBwdData},
    {&kConv2dBwdWeight, Kernel::Conv2dBwdWeight}, {&kLinear, Kernel::LinearFwd},
    {&kLinearBwdData, Kernel::LinearBwdData}, {&kLinearBwdWeight, Kernel::LinearBwdWeight},
    {&kMaxPool2d, Kernel::MaxPoolFwd},       {&kMaxPool2dBwd, Kernel::MaxPoolBwd},
    {&kAvgPool2d, Kernel::AvgPoolFwd},       {&kAvgPool2dBwd, Kernel::AvgPoolBwd},
    {&kGlobalAvgPool, Kernel::GlobalAvgPoolFwd}, {&kGlobalAvgPoolBwd, Kernel::GlobalAvgPoolBwd},
    {&kAdaptiveAvgPool2d, Kernel::AdaptiveAvgPoolFwd}, {&kAdaptiveAvgPool2dBwd, Kernel::AdaptiveAvgPoolBwd},
    {&kBatchNorm, Kernel::BatchNormFwd},     {&kBatchNormBwd, Kernel::BatchNormBwd},
    {&kGroupNorm, Kernel::GroupNormFwd},     {&kGroupNormBwd, Kernel::GroupNormBwd},
    {&kRelu, Kernel::ReluFwd},               {&kReluBwd, Kernel::ReluBwd},
    {&kDropout, Kernel::DropoutFwd},         {&kDropoutBwd, Kernel::DropoutBwd},
    {&kAdd, Kernel::Add},                    {&kSoftmaxXent, Kernel::SoftmaxXentFwd},
    {&kSoftmaxXentBwd, Kernel::SoftmaxXentBwd},
};

// A graph op with no row above is an error rather than a silent gap in the coverage.
Kernel kernel_of(const Node& n) {
  for (const auto& [op, kernel] : kOpKernels)
    if (op == n.def) return kernel;
  CRUMB_FAIL("kernel benchmarks: op '", n.def->name, "' (layer '", n.name, "') has no benchmark; add it to ",
             "tools/bench/kernels/cases.cc");
}

// The kernel's shape at `batch` from the node's per-sample geometry and values.
Shape shape_of(const Graph& g, const Node& n, Kernel k, int batch) {
  switch (k) {
    case Kernel::Conv2dFwd:
    case Kernel::Conv2dBwdData:
    case Kernel::Conv2dBwdWeight: return ops::at_batch<cpu::Conv2dShape>(n, batch);
    case Kernel::LinearFwd:
    case Kernel::LinearBwdData:
    case Kernel::LinearBwdWeight: {
      const LinearGeometry& s = ops::geometry<LinearGeometry>(n);
      return LinearShape{batch, s.in, s.out};
    }
    case Kernel::MaxPoolFwd:
    case Kernel::MaxPoolBwd:
    case Kernel::AvgPoolFwd:
    case Kernel::AvgPoolBwd: return ops::at_batch<cpu::Pool2dShape>(n, batch);
    case Kernel::GlobalAvgPoolFwd:
    case Kernel::GlobalAvgPoolBwd: {
      const GlobalPoolGeometry& s = ops::geometry<GlobalPoolGeometry>(n);
      return GlobalPoolShape{batch, s.c, s.hw};
    }
    case Kernel::AdaptiveAvgPoolFwd:
    case Kernel::AdaptiveAvgPoolBwd: return ops::at_batch<cpu::AdaptivePool2dShape>(n, batch);
    case Kernel::BatchNormFwd:
    case Kernel::BatchNormBwd: {
      cpu::BatchNormShape s = ops::at_batch<cpu::BatchNormShape>(n, batch);
      if (s.group == 0) s.group = batch;  // group 0: the whole micro-batch is one group
      return s;
    }
    case Kernel::GroupNormFwd:
    case Kernel::GroupNormBwd: return ops::at_batch<cpu::GroupNormShape>(n, batch);
    case Kernel::DropoutFwd:
    case Kernel::DropoutBwd: return SamplesShape{batch, g.value(n.out[0]).count(1)};
    case Kernel::SoftmaxXentFwd:
    case Kernel::SoftmaxXentBwd: return ClassesShape{batch, ops::geometry<ClassesGeometry>(n).k};
    default: return Elements{g.value(n.out[0]).count(batch)};
  }
}

bool has_bias(const Node& n, Kernel k) {
  switch (k) {
    case Kernel::Conv2dFwd:
    case Kernel::LinearFwd: return n.in.size() == 3;
    case Kernel::Conv2dBwdWeight:
    case Kernel::LinearBwdWeight: return n.out.size() == 2;
    default: return false;
  }
}

Graph build_graph(const Suite& s, const models::NormSpec& norm) {
  const models::ModelSpec spec(s.channels, s.height, s.width, s.classes, norm);
  Graph g = models::build(s.model, spec);
  build_backward(g);
  return g;
}

// Adds the kernel calls of g's training step to out, merging repeats of a shape into `layers`.
// keep(kernel) selects which kernels to take from this graph.
template <class Keep>
void add_graph(const Suite& s, const Graph& g, Keep keep, std::vector<Case>* out, std::map<std::string, int>* index) {
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.def->view) continue;
    const Kernel k = kernel_of(n);
    if (!keep(k)) continue;
    Case c{k, s.name, n.name, shape_of(g, n, k, s.batch), has_bias(n, k)};
    const std::string key = std::string(kernel_name(k)) + " " + c.describe() + (c.bias ? " bias" : "");
    const auto [it, fresh] = index->emplace(key, static_cast<int>(out->size()));
    if (fresh) {
      out->push_back(std::move(c));
    } else {
      ++(*out)[it->second].layers;
    }
  }
}

std::vector<Case> model_cases(const Suite& s) {
  std::vector<Case> out;
  std::map<std::string, int> index;
  const Graph g = build_graph(s, {});
  add_graph(s, g, [](Kernel) { return true; }, &out, &index);
  // No reference model average-pools, so avg_pool runs at the shapes of the model's max pools.
  for (std::size_t i = 0, end = out.size(); i < end; ++i) {
    if (out[i].kernel != Kernel::MaxPoolFwd && out[i].kernel != Kernel::MaxPoolBwd) continue;
    Case avg = out[i];
    avg.kernel = out[i].kernel == Kernel::MaxPoolFwd ? Kernel::AvgPoolFwd : Kernel::AvgPoolBwd;
    out.push_back(std::move(avg));
  }
  // Models with normalisation train with BatchNorm by default and GroupNorm under --norm gn: the same
  // graph but for the norm layers, so only those are taken from the GroupNorm build.
  if (models::has_norm(s.model)) {
    models::NormSpec gn;
    gn.kind = models::NormSpec::Kind::Group;
    add_graph(s, build_graph(s, gn), [](Kernel k) { return k == Kernel::GroupNormFwd || k == Kernel::GroupNormBwd; },
              &out, &index);
  }
  int64_t params = 0;
  for (ValueId p : g.params()) params += g.value(p).count(1);
  for (Kernel k : {Kernel::SgdStep, Kernel::AdamWStep, Kernel::CountNonfinite, Kernel::CopyAccumulate})
    out.push_back(Case{k, s.name, "parameters", Elements{params}});
  return out;
}

// DeepBench's training set (github.com/baidu-research/DeepBench, code/kernels/conv_problems.h and
// gemm_problems.h), a few rows each: speech (DeepSpeech's first layers), ImageNet-sized 3x3, 5x5 and
// strided 1x1 convolutions; GEMMs of recurrent and fully connected layers.
struct DeepBenchConv {  // DeepBench's column order: w, h, c, n, k, s (filter w), r (filter h), pads, strides
  int w, h, c, n, k, s, r, pad_w, pad_h, stride_w, stride_h;
};
const DeepBenchConv kDeepBenchConvs[] = {
    {700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2},   {341, 79, 32, 4, 32, 10, 5, 0, 0, 2, 2},
    {54, 54, 64, 8, 64, 3, 3, 1, 1, 1, 1},     {28, 28, 192, 16, 32, 5, 5, 2, 2, 1, 1},
    {14, 14, 256, 8, 1024, 1, 1, 0, 0, 2, 2},  {7, 7, 832, 16, 256, 1, 1, 0, 0, 1, 1},
};
struct DeepBenchGemm {  // DeepBench's m, n, k: C [m, n] = A [m, k] B [k, n]
  int m, n, k;
};
const DeepBenchGemm kDeepBenchGemms[] = {
    {1760, 128, 1760}, {2560, 64, 2560}, {4096, 128, 4096}, {3072, 128, 1024}, {35, 8457, 2560}, {1024, 700, 512},
};

std::vector<Case> deepbench_cases() {
  std::vector<Case> out;
  for (const DeepBenchConv& d : kDeepBenchConvs) {
    const cpu::Conv2dShape s{d.n, d.c, d.h, d.w, d.k, d.r, d.s, d.stride_h, d.stride_w, d.pad_h, d.pad_w,
                             (d.h + 2 * d.pad_h - d.r) / d.stride_h + 1, (d.w + 2 * d.pad_w - d.s) / d.stride_w + 1};
    const std::string layer = "conv_" + std::to_string(d.w) + "x" + std::to_string(d.h) + "x" + std::to_string(d.c) +
                              "_k" + std::to_string(d.k) + "_n" + std::to_string(d.n);
    for (Kernel k : {Kernel::Conv2dFwd, Kernel::Conv2dBwdData, Kernel::Conv2dBwdWeight})
      out.push_back(Case{k, "deepbench", layer, s});
  }
  // A GEMM of DeepBench's as a linear layer: the batch is n, in = k and out = m; the two backward passes
  // are the transposed products DeepBench lists separately.
  for (const DeepBenchGemm& d : kDeepBenchGemms) {
    const std::string layer =
        "gemm_" + std::to_string(d.m) + "x" + std::to_string(d.n) + "x" + std::to_string(d.k);
    for (Kernel k : {Kernel::LinearFwd, Kernel::LinearBwdData, Kernel::LinearBwdWeight})
      out.push_back(Case{k, "deepbench", layer, LinearShape{d.n, d.k, d.m}});
  }
  return out;
}

template <class... Ts> struct Overload : Ts... { using Ts::operator()...; };
template <class... Ts> Overload(Ts...) -> Overload<Ts...>;

double conv_flops(const cpu::Conv2dShape& s) { return 2.0 * s.out_count() * s.c_in * s.kh * s.kw; }
double pool_in(const cpu::Pool2dShape& s) { return 1.0 * s.n * s.c * s.h * s.w; }
double pool_out(const cpu::Pool2dShape& s) { return 1.0 * s.n * s.c * s.h_out * s.w_out; }
double adaptive_in(const cpu::AdaptivePool2dShape& s) { return 1.0 * s.n * s.c * s.h * s.w; }
double adaptive_out(const cpu::AdaptivePool2dShape& s) { return 1.0 * s.n * s.c * s.h_out * s.w_out; }

}  // namespace

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::Conv2dFwd: return "conv2d_fwd";
    case Kernel::Conv2dBwdData: return "conv2d_bwd_data";
    case Kernel::Conv2dBwdWeight: return "conv2d_bwd_weight";
    case Kernel::LinearFwd: return "linear_fwd";
    case Kernel::LinearBwdData: return "linear_bwd_data";
    case Kernel::LinearBwdWeight: return "linear_bwd_weight";
    case Kernel::MaxPoolFwd: return "max_pool_fwd";
    case Kernel::MaxPoolBwd: return "max_pool_bwd";
    case Kernel::AvgPoolFwd: return "avg_pool_fwd";
    case Kernel::AvgPoolBwd: return "avg_pool_bwd";
    case Kernel::GlobalAvgPoolFwd: return "global_avg_pool_fwd";
    case Kernel::GlobalAvgPoolBwd: return "global_avg_pool_bwd";
    case Kernel::AdaptiveAvgPoolFwd: return "adaptive_avg_pool_fwd";
    case Kernel::AdaptiveAvgPoolBwd: return "adaptive_avg_pool_bwd";
    case Kernel::BatchNormFwd: return "batch_norm_fwd";
    case Kernel::BatchNormBwd: return "batch_norm_bwd";
    case Kernel::GroupNormFwd: return "group_norm_fwd";
    case Kernel::GroupNormBwd: return "group_norm_bwd";
    case Kernel::ReluFwd: return "relu_fwd";
    case Kernel::ReluBwd: return "relu_bwd";
    case Kernel::DropoutFwd: return "dropout_fwd";
    case Kernel::DropoutBwd: return "dropout_bwd";
    case Kernel::Add: return "add";
    case Kernel::SoftmaxXentFwd: return "softmax_xent_fwd";
    case Kernel::SoftmaxXentBwd: return "softmax_xent_bwd";
    case Kernel::SgdStep: return "sgd_momentum_step";
    case Kernel::AdamWStep: return "adamw_step";
    case Kernel::CountNonfinite: return "count_nonfinite";
    case Kernel::CopyAccumulate: return "copy_or_accumulate";
  }
  return "?";
}

bool compute_bound(Kernel k) {
  switch (k) {
    case Kernel::Conv2dFwd:
    case Kernel::Conv2dBwdData:
    case Kernel::Conv2dBwdWeight:
    case Kernel::LinearFwd:
    case Kernel::LinearBwdData:
    case Kernel::LinearBwdWeight: return true;
    default: return false;
  }
}

std::string Case::name() const { return std::string(kernel_name(kernel)) + "/" + suite + "/" + layer; }

std::string Case::describe() const {
  std::ostringstream o;
  std::visit(Overload{
                 [&](const cpu::Conv2dShape& s) {
                   o << "x[" << s.n << "," << s.c_in << "," << s.h << "," << s.w << "] w[" << s.c_out << "," << s.c_in
                     << "," << s.kh << "," << s.kw << "] s" << s.stride_h << "x" << s.stride_w << " p" << s.pad_h
                     << "x" << s.pad_w;
                 },
                 [&](const cpu::Pool2dShape& s) {
                   o << "x[" << s.n << "," << s.c << "," << s.h << "," << s.w << "] k" << s.kh << "x" << s.kw << " s"
                     << s.stride_h << " p" << s.pad_h;
                 },
                 [&](const cpu::AdaptivePool2dShape& s) {
                   o << "x[" << s.n << "," << s.c << "," << s.h << "," << s.w << "] out " << s.h_out << "x"
                     << s.w_out;
                 },
                 [&](const cpu::BatchNormShape& s) {
                   o << "x[" << s.n << "," << s.c << "," << s.hw << "] group " << s.group;
                 },
                 [&](const cpu::GroupNormShape& s) {
                   o << "x[" << s.n << "," << s.c << "," << s.hw << "] groups " << s.groups;
                 },
                 [&](const LinearShape& s) { o << "x[" << s.n << "," << s.in << "] w[" << s.out << "," << s.in << "]"; },
                 [&](const GlobalPoolShape& s) { o << "x[" << s.n << "," << s.c << "," << s.hw << "]"; },
                 [&](const SamplesShape& s) { o << "x[" << s.n << "," << s.per_sample << "]"; },
                 [&](const ClassesShape& s) { o << "logits[" << s.n << "," << s.k << "]"; },
                 [&](const Elements& s) { o << "count " << s.count; },
             },
             shape);
  return o.str();
}

double Case::flops() const {
  if (const auto* s = std::get_if<cpu::Conv2dShape>(&shape)) return conv_flops(*s);
  if (const auto* s = std::get_if<LinearShape>(&shape)) return 2.0 * s->n * s->in * s->out;
  return 0;
}

double Case::bytes() const {
  switch (kernel) {
    case Kernel::MaxPoolFwd:
    case Kernel::MaxPoolBwd: {  // x or dx; y or dy; the 1-byte argmax
      const auto& s = std::get<cpu::Pool2dShape>(shape);
      return kFloat * (pool_in(s) + pool_out(s)) + pool_out(s);
    }
    case Kernel::AvgPoolFwd:
    case Kernel::AvgPoolBwd: {
      const auto& s = std::get<cpu::Pool2dShape>(shape);
      return kFloat * (pool_in(s) + pool_out(s));
    }
    case Kernel::GlobalAvgPoolFwd:
    case Kernel::GlobalAvgPoolBwd: {
      const auto& s = std::get<GlobalPoolShape>(shape);
      return kFloat * (1.0 * s.n * s.c * s.hw + 1.0 * s.n * s.c);
    }
    case Kernel::AdaptiveAvgPoolFwd:  // x in, y out; dy in, dx out: each cell once, however bins overlap
    case Kernel::AdaptiveAvgPoolBwd: {
      const auto& s = std::get<cpu::AdaptivePool2dShape>(shape);
      return kFloat * (adaptive_in(s) + adaptive_out(s));
    }
    case Kernel::DropoutFwd:  // x in, y out; dy in, dx out. The mask is recomputed, never stored.
    case Kernel::DropoutBwd: {
      const auto& s = std::get<SamplesShape>(shape);
      return kFloat * 2.0 * s.n * s.per_sample;
    }
    case Kernel::BatchNormFwd: {  // x in, y out
      const auto& s = std::get<cpu::BatchNormShape>(shape);
      return kFloat * 2.0 * s.n * s.c * s.hw;
    }
    case Kernel::BatchNormBwd: {  // dy and x in, dx out
      const auto& s = std::get<cpu::BatchNormShape>(shape);
      return kFloat * 3.0 * s.n * s.c * s.hw;
    }
    case Kernel::GroupNormFwd: {
      const auto& s = std::get<cpu::GroupNormShape>(shape);
      return kFloat * 2.0 * s.n * s.c * s.hw;
    }
    case Kernel::GroupNormBwd: {
      const auto& s = std::get<cpu::GroupNormShape>(shape);
      return kFloat * 3.0 * s.n * s.c * s.hw;
    }
    case Kernel::SoftmaxXentFwd:
    case Kernel::SoftmaxXentBwd: {  // logits in, probs out; probs in, dlogits out
      const auto& s = std::get<ClassesShape>(shape);
      return kFloat * 2.0 * s.n * s.k;
    }
    case Kernel::ReluFwd: return kFloat * 2.0 * std::get<Elements>(shape).count;            // x, y
    case Kernel::ReluBwd:                                                                      // dy, y, dx
    case Kernel::Add:                                                                          // a, b, y
    case Kernel::CopyAccumulate: return kFloat * 3.0 * std::get<Elements>(shape).count;     // y, x, y
    case Kernel::SgdStep: return kFloat * 5.0 * std::get<Elements>(shape).count;            // p, g, buf; p, buf
    case Kernel::AdamWStep: return kFloat * 7.0 * std::get<Elements>(shape).count;          // p, g, m, v; p, m, v
    case Kernel::CountNonfinite: return kFloat * 1.0 * std::get<Elements>(shape).count;
    default: return 0;  // GEMM-like: judged by flops()
  }
}

const std::vector<Suite>& suites() {
  // Batches: the CLI's default 64 for the Fashion-MNIST models, 128 for the CIFAR-sized ones (the usual
  // CIFAR training batch; the ResNets also at Fashion-MNIST's 1x28x28, the shapes compare.sh trains),
  // and 8 at 224x224 (DeepBench's smallest ImageNet batch) so a full run of the CPU kernels stays
  // within minutes on a small machine.
  static const std::vector<Suite> all = {
      {"lenet5", "lenet5", 1, 28, 28, 10, 64},          {"cnn", "cnn", 1, 28, 28, 10, 64},
      {"resnet20", "resnet20", 3, 32, 32, 10, 128},     {"resnet20_28", "resnet20", 1, 28, 28, 10, 128},
      {"resnet18_28", "resnet18", 1, 28, 28, 10, 128},  {"resnet50_224", "resnet50", 3, 224, 224, 1000, 8},
      {"vgg11_bn_32", "vgg11_bn", 3, 32, 32, 10, 128},  {"vgg11_bn_224", "vgg11_bn", 3, 224, 224, 1000, 8},
      {"deepbench", "", 0, 0, 0, 0, 0},
  };
  return all;
}

DropoutArgs dropout_args() {
  DropoutAttrs a;
  a.p = 0.5;
  return {RandomKey{0x5eed, 0}, 1, a.threshold(), static_cast<float>(a.scale())};
}

std::vector<Case> cases(const Suite& suite) { return suite.model.empty() ? deepbench_cases() : model_cases(suite); }

}  // namespace crumb::bench
