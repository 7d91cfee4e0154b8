#include "tools/bench/kernels/cpu.h"

#include <functional>
#include <vector>

#include "engine/base/error.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/sgd.h"
#include "kernels/cpu/softmax_xent.h"

namespace crumb::bench {
namespace {

// Owns a benchmark's operands (see operand_value).
class Operands {
 public:
  float* floats(int64_t count) {
    auto& v = floats_.emplace_back(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = operand_value(i);
    return v.data();
  }
  template <class T> T* zeros(int64_t count) {
    auto& v = raw_.emplace_back(static_cast<std::size_t>(count) * sizeof(T));
    return reinterpret_cast<T*>(v.data());
  }
  // Labels in [0, k), spread over the classes.
  int32_t* labels(int n, int k) {
    int32_t* l = zeros<int32_t>(n);
    for (int i = 0; i < n; ++i) l[i] = i % k;
    return l;
  }

 private:
  std::vector<std::vector<float>> floats_;
  // Byte storage for the other element types; operator new's alignment suits any of them.
  std::vector<std::vector<unsigned char>> raw_;
};

int64_t conv_weights(const cpu::Conv2dShape& s) { return int64_t(s.c_out) * s.c_in * s.kh * s.kw; }
int64_t pool_in(const cpu::Pool2dShape& s) { return int64_t(s.n) * s.c * s.h * s.w; }
int64_t pool_out(const cpu::Pool2dShape& s) { return int64_t(s.n) * s.c * s.h_out * s.w_out; }

// A training step's write mode: the first micro-batch of a batch writes its gradients (=).
constexpr bool kWrite = false;

// Sets up the case's operands in `ops` (running a forward first where a backward needs its outputs) and
// returns one call of the kernel. *workspace_bytes receives the scratch the call needs.
std::function<void()> prepare(const Case& c, Operands& ops, std::size_t* workspace_bytes) {
  switch (c.kernel) {
    case Kernel::Conv2dFwd:
    case Kernel::Conv2dBwdData:
    case Kernel::Conv2dBwdWeight: {
      const auto& s = std::get<cpu::Conv2dShape>(c.shape);
      const std::size_t ws = c.kernel == Kernel::Conv2dFwd       ? cpu::conv2d_forward_workspace(s)
                             : c.kernel == Kernel::Conv2dBwdData ? cpu::conv2d_backward_data_workspace(s)
                                                                  : cpu::conv2d_backward_weight_workspace(s);
      *workspace_bytes = ws * sizeof(float);
      float* work = ops.floats(static_cast<int64_t>(ws));
      float* x = ops.floats(s.in_count());
      float* y = ops.floats(s.out_count());
      float* w = ops.floats(conv_weights(s));
      float* b = c.bias ? ops.floats(s.c_out) : nullptr;
      if (c.kernel == Kernel::Conv2dFwd) return [=] { cpu::conv2d_forward<float>(y, x, w, b, s, work); };
      if (c.kernel == Kernel::Conv2dBwdData)
        return [=] { cpu::conv2d_backward_data<float>(x, y, w, s, work, kWrite); };
      return [=] { cpu::conv2d_backward_weight<float>(w, b, y, x, s, work, kWrite); };
    }
    case Kernel::LinearFwd:
    case Kernel::LinearBwdData:
    case Kernel::LinearBwdWeight: {
      const auto& s = std::get<LinearShape>(c.shape);
      float* x = ops.floats(int64_t(s.n) * s.in);
      float* y = ops.floats(int64_t(s.n) * s.out);
      float* w = ops.floats(int64_t(s.out) * s.in);
      float* b = c.bias ? ops.floats(s.out) : nullptr;
      if (c.kernel == Kernel::LinearFwd) return [=] { cpu::linear_forward<float>(y, x, w, b, s.n, s.in, s.out); };
      if (c.kernel == Kernel::LinearBwdData)
        return [=] { cpu::linear_backward_data<float>(x, y, w, s.n, s.in, s.out, kWrite); };
      return [=] { cpu::linear_backward_weight<float>(w, b, y, x, s.n, s.in, s.out, kWrite); };
    }
    case Kernel::MaxPoolFwd:
    case Kernel::MaxPoolBwd: {
      const auto& s = std::get<cpu::Pool2dShape>(c.shape);
      float* x = ops.floats(pool_in(s));
      float* y = ops.floats(pool_out(s));
      uint8_t* argmax = ops.zeros<uint8_t>(pool_out(s));
      cpu::max_pool2d_forward<float>(y, argmax, x, s);
      if (c.kernel == Kernel::MaxPoolFwd) return [=] { cpu::max_pool2d_forward<float>(y, argmax, x, s); };
      return [=] { cpu::max_pool2d_backward<float>(x, y, argmax, s, kWrite); };
    }
    case Kernel::AvgPoolFwd:
    case Kernel::AvgPoolBwd: {
      const auto& s = std::get<cpu::Pool2dShape>(c.shape);
      float* x = ops.floats(pool_in(s));
      float* y = ops.floats(pool_out(s));
      if (c.kernel == Kernel::AvgPoolFwd) return [=] { cpu::avg_pool2d_forward<float>(y, x, s); };
      return [=] { cpu::avg_pool2d_backward<float>(x, y, s, kWrite); };
    }
    case Kernel::GlobalAvgPoolFwd:
    case Kernel::GlobalAvgPoolBwd: {
      const auto& s = std::get<GlobalPoolShape>(c.shape);
      float* x = ops.floats(int64_t(s.n) * s.c * s.hw);
      float* y = ops.floats(int64_t(s.n) * s.c);
      if (c.kernel == Kernel::GlobalAvgPoolFwd) return [=] { cpu::global_avg_pool_forward<float>(y, x, s.n, s.c, s.hw); };
      return [=] { cpu::global_avg_pool_backward<float>(x, y, s.n, s.c, s.hw, kWrite); };
    }
    case Kernel::AdaptiveAvgPoolFwd:
    case Kernel::AdaptiveAvgPoolBwd: {
      const auto& s = std::get<cpu::AdaptivePool2dShape>(c.shape);
      float* x = ops.floats(int64_t(s.n) * s.c * s.h * s.w);
      float* y = ops.floats(int64_t(s.n) * s.c * s.h_out * s.w_out);
      if (c.kernel == Kernel::AdaptiveAvgPoolFwd) return [=] { cpu::adaptive_avg_pool2d_forward<float>(y, x, s); };
      return [=] { cpu::adaptive_avg_pool2d_backward<float>(x, y, s, kWrite); };
    }
    case Kernel::BatchNormFwd:
    case Kernel::BatchNormBwd: {
      const auto& s = std::get<cpu::BatchNormShape>(c.shape);
      const int64_t count = int64_t(s.n) * s.c * s.hw;
      float* x = ops.floats(count);
      float* y = ops.floats(count);
      float* dx = ops.floats(count);
      float* w = ops.floats(s.c);
      float* b = ops.floats(s.c);
      float* stats = ops.floats(int64_t(s.groups()) * 2 * s.c);
      // The default (deferred) running statistics: each call merges its groups' moments.
      double* moments = ops.zeros<double>(3 * int64_t(s.c));
      auto forward = [=] {
        cpu::batch_norm_forward_train<float>(y, stats, x, w, b, s, 1e-5, moments, nullptr, nullptr, nullptr, 0.1);
      };
      forward();
      if (c.kernel == Kernel::BatchNormFwd) return forward;
      return [=] { cpu::batch_norm_backward<float>(w, b, dx, y, x, w, stats, s, true, kWrite); };
    }
    case Kernel::GroupNormFwd:
    case Kernel::GroupNormBwd: {
      const auto& s = std::get<cpu::GroupNormShape>(c.shape);
      const int64_t count = int64_t(s.n) * s.c * s.hw;
      float* x = ops.floats(count);
      float* y = ops.floats(count);
      float* dx = ops.floats(count);
      float* w = ops.floats(s.c);
      float* b = ops.floats(s.c);
      float* stats = ops.floats(int64_t(s.n) * 2 * s.groups);
      auto forward = [=] { cpu::group_norm_forward<float>(y, stats, x, w, b, s, 1e-5); };
      forward();
      if (c.kernel == Kernel::GroupNormFwd) return forward;
      return [=] { cpu::group_norm_backward<float>(w, b, dx, y, x, w, stats, s, kWrite); };
    }
    case Kernel::ReluFwd:
    case Kernel::ReluBwd:
    case Kernel::Add:
    case Kernel::CopyAccumulate: {
      const int64_t n = std::get<Elements>(c.shape).count;
      float* a = ops.floats(n);
      float* b = ops.floats(n);
      float* out = ops.floats(n);
      if (c.kernel == Kernel::ReluFwd) return [=] { cpu::relu_forward<float>(out, a, n); };
      if (c.kernel == Kernel::ReluBwd) return [=] { cpu::relu_backward<float>(out, a, b, n, kWrite); };
      if (c.kernel == Kernel::Add) return [=] { cpu::add_forward<float>(out, a, b, n); };
      // Gradient accumulation's add-in-place form; repeated calls grow `out` by at most n * 0.5.
      return [=] { cpu::copy_or_accumulate<float>(out, a, n, true); };
    }
    case Kernel::DropoutFwd:
    case Kernel::DropoutBwd: {
      // Forward and backward are one map (x or dy in, y or dx out), both writing: the forward always does,
      // the backward in a batch's first micro-batch.
      const auto& s = std::get<SamplesShape>(c.shape);
      float* x = ops.floats(s.n * s.per_sample);
      float* y = ops.floats(s.n * s.per_sample);
      const DropoutArgs d = dropout_args();
      return [=] {
        cpu::dropout<float>(y, x, s.n, s.per_sample, d.key, d.layer, d.threshold, d.scale, kWrite);
      };
    }
    case Kernel::SoftmaxXentFwd:
    case Kernel::SoftmaxXentBwd: {
      const auto& s = std::get<ClassesShape>(c.shape);
      float* logits = ops.floats(int64_t(s.n) * s.k);
      float* probs = ops.floats(int64_t(s.n) * s.k);
      const int32_t* labels = ops.labels(s.n, s.k);
      cpu::softmax_xent_forward<float>(probs, logits, labels, s.n, s.k);
      if (c.kernel == Kernel::SoftmaxXentFwd)
        return [=] { benchmark::DoNotOptimize(cpu::softmax_xent_forward<float>(probs, logits, labels, s.n, s.k)); };
      return [=] { cpu::softmax_xent_backward<float>(logits, probs, labels, s.n, s.k, 1.0f / s.n, kWrite); };
    }
    case Kernel::SgdStep: {
      const int64_t n = std::get<Elements>(c.shape).count;
      float* p = ops.floats(n);
      float* g = ops.floats(n);
      float* buf = ops.floats(n);
      return [=] { cpu::sgd_momentum_step(p, g, buf, n, 1e-3f, 0.9f, 5e-4f, false, false); };
    }
    case Kernel::AdamWStep: {
      const int64_t n = std::get<Elements>(c.shape).count;
      float* p = ops.floats(n);
      float* g = ops.floats(n);
      float* m = ops.floats(n);
      float* v = ops.floats(n);
      for (int64_t i = 0; i < n; ++i) v[i] *= v[i];  // a second moment is never negative
      const AdamWScalars s = adamw_scalars(1e-3, 0.9, 0.999, 1e-8, 1e-2, 10);
      return [=] { cpu::adamw_step(p, g, m, v, n, s); };
    }
    case Kernel::CountNonfinite: {
      const int64_t n = std::get<Elements>(c.shape).count;
      const float* p = ops.floats(n);
      return [=] { benchmark::DoNotOptimize(cpu::count_nonfinite(p, n)); };
    }
  }
  CRUMB_FAIL("kernel benchmarks: no CPU call for ", kernel_name(c.kernel));
}

void run(benchmark::State& state, const Case& c, const Peak& peak) {
  Operands ops;
  std::size_t workspace_bytes = 0;
  const std::function<void()> call = prepare(c, ops, &workspace_bytes);
  for (auto _ : state) {
    call();
    benchmark::ClobberMemory();
  }
  report(state, c, peak);
  if (compute_bound(c.kernel)) state.counters["workspace_bytes"] = static_cast<double>(workspace_bytes);
}

}  // namespace

void register_cpu(const std::vector<Case>& cases, const Peak& peak) {
  for (const Case& c : cases) {
    // Wall-clock time: the kernels run on several OpenMP threads, whose CPU time would add up.
    benchmark::RegisterBenchmark(("cpu/" + c.name()).c_str(), run, c, peak)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace crumb::bench
