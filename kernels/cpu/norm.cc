// BatchNorm and GroupNorm on NCHW. A normalisation group's values of one channel are hw-long contiguous
// runs (one per sample), so every loop below is a run of simd-friendly passes over contiguous memory.
// Work splits over channels or blocks of them (BatchNorm: a channel's groups are visited in order, so its
// running statistics and moments are merged in a fixed order) or over (sample, group) rows (GroupNorm):
// results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/kernel_util.h"
#include "kernels/norm.h"

namespace crumb::cpu {
namespace {
using detail::kParallelGrain;
using detail::load;
using detail::put;
using detail::store;
using detail::with_write_mode;

// Sums over many values in double, as 16 partial sums: value i of a run goes to lane i % 16, the lanes
// carry on from run to run and are added in a fixed order at the end. Independent partial sums are what
// lets the adds overlap (one running sum waits out each add's latency, which bounded these passes); the
// order is the source's, so the bits do not depend on the vector width or the thread count, and a fused
// backward, adding the same values in the same order, has the unfused one's bits. GCC's vector types keep
// the lanes in registers on any x86-64 (two 512-bit, four 256-bit or eight 128-bit ones).
typedef double D8 __attribute__((vector_size(64)));
typedef float F8 __attribute__((vector_size(32)));
constexpr int kLanes = 16;
struct Lanes {
  D8 v[2] = {};
  double total() const {
    const D8 s = v[0] + v[1];
    double t[8];
    for (int k = 0; k < 8; ++k) t[k] = s[k];
    for (int w = 4; w >= 1; w /= 2)
      for (int k = 0; k < w; ++k) t[k] += t[k + w];
    return t[0];
  }
  void add_at(int lane, double value) { v[lane / 8][lane % 8] += value; }
};
// Eight values from p, in double.
template <class T> inline D8 load8(const T* p) {
  if constexpr (std::is_same_v<T, double>) {
    D8 v;
    std::memcpy(&v, p, sizeof v);
    return v;
  } else {
    F8 f;
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(&f, p, sizeof f);
    } else {
      for (int k = 0; k < 8; ++k) f[k] = load(p[k]);
    }
    return __builtin_convertvector(f, D8);
  }
}
// s += p[i] over i < len.
template <class T> void add_values(Lanes& s, const T* p, int len) {
  D8 a0 = s.v[0], a1 = s.v[1];
  int i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    a0 += load8(p + i);
    a1 += load8(p + i + 8);
  }
  s.v[0] = a0, s.v[1] = a1;
  for (int k = 0; i + k < len; ++k) s.add_at(k, load(p[i + k]));
}
// s += (p[i] - mean)^2 over i < len.
template <class T> void add_squares(Lanes& s, const T* p, int len, double mean) {
  D8 a0 = s.v[0], a1 = s.v[1];
  int i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    const D8 d0 = load8(p + i) - mean, d1 = load8(p + i + 8) - mean;
    a0 += d0 * d0;
    a1 += d1 * d1;
  }
  s.v[0] = a0, s.v[1] = a1;
  for (int k = 0; i + k < len; ++k) {
    const double d = load(p[i + k]) - mean;
    s.add_at(k, d * d);
  }
}
// s += g[i], t += g[i] (x[i] - mean) over i < len.
template <class G, class T> void add_moments(Lanes& s, Lanes& t, const G* g, const T* x, int len, double mean) {
  D8 a0 = s.v[0], a1 = s.v[1], b0 = t.v[0], b1 = t.v[1];
  int i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    const D8 g0 = load8(g + i), g1 = load8(g + i + 8);
    a0 += g0;
    a1 += g1;
    b0 += g0 * (load8(x + i) - mean);
    b1 += g1 * (load8(x + i + 8) - mean);
  }
  s.v[0] = a0, s.v[1] = a1, t.v[0] = b0, t.v[1] = b1;
  for (int k = 0; i + k < len; ++k) {
    const double gk = load(g[i + k]);
    s.add_at(k, gk);
    t.add_at(k, gk * (load(x[i + k]) - mean));
  }
}

// Mean and M2 (sum of squared deviations) of `runs` runs of `len` values, run r at x + r * stride.
struct Moments {
  double mean, m2;
};
template <class T> Moments moments_of(const T* x, int runs, std::ptrdiff_t stride, int len) {
  Lanes sum;
  for (int r = 0; r < runs; ++r) add_values(sum, x + r * stride, len);
  const double count = double(runs) * len, mean = sum.total() / count;
  Lanes m2;
  for (int r = 0; r < runs; ++r) add_squares(m2, x + r * stride, len, mean);
  return {mean, m2.total()};
}

// The ReLU of a value already rounded to T, which it leaves exact (NaN propagates, as relu_forward's).
template <class A> A relu_of(A v) { return v <= A(0) ? A(0) : v; }

// y = x * scale + shift over `runs` runs of `len` values, then the fused epilogue: + the residual (res, at
// x's offsets; null: none) and the ReLU, rounded to T after each part as the separate ops round.
template <class T>
void affine_runs(T* y, const T* x, int runs, std::ptrdiff_t stride, int len, Arith<T> scale, Arith<T> shift,
                 const T* res = nullptr, bool relu = false) {
  for (int r = 0; r < runs; ++r) {
    const T* p = x + r * stride;
    const T* pr = res ? res + r * stride : nullptr;
    T* q = y + r * stride;
    if (pr && relu) {
#pragma omp simd
      for (int i = 0; i < len; ++i) q[i] = store<T>(relu_of(load(store<T>(load(store<T>(load(p[i]) * scale + shift)) + load(pr[i])))));
    } else if (pr) {
#pragma omp simd
      for (int i = 0; i < len; ++i) q[i] = store<T>(load(store<T>(load(p[i]) * scale + shift)) + load(pr[i]));
    } else if (relu) {
#pragma omp simd
      for (int i = 0; i < len; ++i) q[i] = store<T>(relu_of(load(store<T>(load(p[i]) * scale + shift))));
    } else {
#pragma omp simd
      for (int i = 0; i < len; ++i) q[i] = store<T>(load(p[i]) * scale + shift);
    }
  }
}

// The gradient reaching the normalisation over `len` values from `from` into g: dy where the fused
// forward's output y is > 0 (NormReluGrad). A loop of its own over plain arguments, so that it vectorises.
template <class T> void gate_run(T* g, const T* dy, const T* y, std::ptrdiff_t from, int len) {
  using A = Arith<T>;
  const T zero = store<T>(A(0));
  const T* d = dy + from;
  const T* py = y + from;
#pragma omp simd
  for (int i = 0; i < len; ++i) g[i] = load(py[i]) > A(0) ? d[i] : zero;
}
// Values per chunk of gate_run's output, on the stack (a multiple of kLanes, so a run's lanes do not
// depend on its chunking).
constexpr int kGateChunk = 4096;
static_assert(kGateChunk % kLanes == 0);

// sg += sum of g, sgx += sum of g (x - mean) over the run of `len` values at `run`, g the gradient reaching
// the normalisation (dy itself without a ReLU: y null), written to gout there where given (it may alias dy).
template <class T>
void sums_run(Lanes& sg, Lanes& sgx, const T* dy, const T* x, T* gout, const T* y, std::ptrdiff_t run, int len,
              double mean) {
  const T* px = x + run;
  if (!y) {
    add_moments(sg, sgx, dy + run, px, len, mean);
    return;
  }
  if (gout) {
    gate_run(gout + run, dy, y, run, len);
    add_moments(sg, sgx, gout + run, px, len, mean);
    return;
  }
  T g[kGateChunk];
  for (int from = 0; from < len; from += kGateChunk) {
    const int n = std::min(kGateChunk, len - from);
    gate_run(g, dy, y, run + from, n);
    add_moments(sg, sgx, g, px + from, n, mean);
  }
}

// dx = k g - a - slope (x - mean) over the run of `len` values at `run` (dx may alias g).
template <class T>
void dx_run(T* dx, const T* g, const T* x, std::ptrdiff_t run, int len, Arith<T> k, Arith<T> a, Arith<T> slope,
            Arith<T> mean) {
  T* pdx = dx + run;
  const T* pg = g + run;
  const T* px = x + run;
#pragma omp simd
  for (int i = 0; i < len; ++i) pdx[i] = store<T>(k * load(pg[i]) - a - slope * (load(px[i]) - mean));
}

double inv_std(double var, double eps) { return 1.0 / std::sqrt(var + eps); }

// y = (x - mean) * invstd * w + b over channel c of group g, from the group's statistics as stored (rounded
// to Arith<T>): batch_norm_apply recomputes the training forward's output bit for bit from them.
template <class T, class A = Arith<T>>
void normalize_group(T* y, const T* x, const A* w, const A* b, const A* stats, const BatchNormShape& s, int c, int g,
                     const NormEpilogue<T>& e) {
  const std::ptrdiff_t stride = std::ptrdiff_t{s.c} * s.hw, at = g * s.group * stride + std::ptrdiff_t{c} * s.hw;
  const double mean = stats[(2 * g) * s.c + c], scale = w[c] * double(stats[(2 * g + 1) * s.c + c]);
  affine_runs(y + at, x + at, s.group_size(g), stride, s.hw, A(scale), A(b[c] - mean * scale),
              e.residual ? e.residual + at : nullptr, e.relu);
}

bool parallel(const BatchNormShape& s) { return std::ptrdiff_t{s.n} * s.c * s.hw > kParallelGrain; }

// A BatchNorm's residual epilogue, y = relu(y + residual) (rounded as the add and the ReLU round), as a pass
// of its own over the whole tensor after the normalisation: the per-channel loops visit a channel's runs a
// sample apart, and a third stream of such runs costs more than one contiguous pass (measured on the CPU).
template <class T> void residual_pass(T* y, const NormEpilogue<T>& e, const BatchNormShape& s) {
  const std::ptrdiff_t count = std::ptrdiff_t{s.n} * s.c * s.hw;
  const T* r = e.residual;
  if (e.relu) {
#pragma omp parallel for simd schedule(static) if (count > kParallelGrain)
    for (std::ptrdiff_t i = 0; i < count; ++i) y[i] = store<T>(relu_of(load(store<T>(load(y[i]) + load(r[i])))));
  } else {
#pragma omp parallel for simd schedule(static) if (count > kParallelGrain)
    for (std::ptrdiff_t i = 0; i < count; ++i) y[i] = store<T>(load(y[i]) + load(r[i]));
  }
}

// A BatchNorm's ReLU mask (NormReluGrad), g = dy where y > 0, as a pass of its own over the whole tensor
// before the normalisation's backward, for the reason residual_pass is one: in the per-channel loops, y's
// runs a sample apart were a third stream beside dy and x, and short runs (a feature map of 1 to 49 values
// in the ResNets' later stages) paid the mask's loop per run: the fused backward measured up to 1.5x the
// unfused pair (kernels_bench, tools/bench/README.md). As one contiguous pass it is relu_backward's.
template <class T> void gate_pass(T* g, const T* dy, const T* y, const BatchNormShape& s) {
  using A = Arith<T>;
  const std::ptrdiff_t count = std::ptrdiff_t{s.n} * s.c * s.hw;
  const T zero = store<T>(A(0));
#pragma omp parallel for simd schedule(static) if (count > kParallelGrain)
  for (std::ptrdiff_t i = 0; i < count; ++i) g[i] = load(y[i]) > A(0) ? dy[i] : zero;
}

}  // namespace

template <class T>
void batch_norm_forward_train(T* y, Arith<T>* stats, const T* x, const Arith<T>* w, const Arith<T>* b,
                              const BatchNormShape& s, double eps, double* moments, Arith<T>* running_mean,
                              Arith<T>* running_var, int64_t* tracked, double momentum,
                              const NormEpilogue<T>& epilogue) {
  if (epilogue.residual) {
    batch_norm_forward_train<T>(y, stats, x, w, b, s, eps, moments, running_mean, running_var, tracked, momentum, {});
    residual_pass(y, epilogue, s);
    return;
  }
  using A = Arith<T>;
  const std::ptrdiff_t stride = std::ptrdiff_t{s.c} * s.hw;
  const int groups = s.groups();
#pragma omp parallel for schedule(static) if (parallel(s))
  for (int c = 0; c < s.c; ++c) {
    for (int g = 0; g < groups; ++g) {
      const int samples = s.group_size(g);
      const std::ptrdiff_t at = g * s.group * stride + std::ptrdiff_t{c} * s.hw;
      const Moments mo = moments_of(x + at, samples, stride, s.hw);
      const double count = double(samples) * s.hw;
      stats[(2 * g) * s.c + c] = A(mo.mean);
      stats[(2 * g + 1) * s.c + c] = A(inv_std(mo.m2 / count, eps));
      normalize_group(y, x, w, b, stats, s, c, g, epilogue);
      if (moments) {  // Chan et al.: merge (count, mean, m2) of the group into the channel's running total
        double& n_a = moments[c];
        double& mean_a = moments[s.c + c];
        double& m2_a = moments[2 * s.c + c];
        const double total = n_a + count, delta = mo.mean - mean_a;
        mean_a += delta * (count / total);
        m2_a += mo.m2 + delta * delta * (n_a * count / total);
        n_a = total;
      }
      if (running_mean) {
        running_mean[c] = A((1 - momentum) * running_mean[c] + momentum * mo.mean);
        running_var[c] = A((1 - momentum) * running_var[c] + momentum * (count > 1 ? mo.m2 / (count - 1) : 0.0));
      }
    }
  }
  if (running_mean) *tracked += groups;
}

template <class T>
void batch_norm_apply(T* y, const T* x, const Arith<T>* w, const Arith<T>* b, const Arith<T>* stats,
                      const BatchNormShape& s, const NormEpilogue<T>& epilogue) {
  if (epilogue.residual) {
    batch_norm_apply<T>(y, x, w, b, stats, s, {});
    residual_pass(y, epilogue, s);
    return;
  }
  const int groups = s.groups();
#pragma omp parallel for schedule(static) if (parallel(s))
  for (int c = 0; c < s.c; ++c)
    for (int g = 0; g < groups; ++g) normalize_group(y, x, w, b, stats, s, c, g, epilogue);
}

template <class T>
void batch_norm_commit(T* running_mean, T* running_var, int64_t* tracked, const double* moments, int c, double momentum) {
  for (int i = 0; i < c; ++i) {
    const double count = moments[i], mean = moments[c + i], m2 = moments[2 * c + i];
    running_mean[i] = T((1 - momentum) * running_mean[i] + momentum * mean);
    running_var[i] = T((1 - momentum) * running_var[i] + momentum * (count > 1 ? m2 / (count - 1) : 0.0));
  }
  *tracked += 1;
}

template <class T>
void batch_norm_forward_frozen(T* y, Arith<T>* stats, const T* x, const Arith<T>* w, const Arith<T>* b,
                               const Arith<T>* running_mean, const Arith<T>* running_var, const BatchNormShape& s,
                               double eps, const NormEpilogue<T>& epilogue) {
  if (epilogue.residual) {
    batch_norm_forward_frozen<T>(y, stats, x, w, b, running_mean, running_var, s, eps, {});
    residual_pass(y, epilogue, s);
    return;
  }
  using A = Arith<T>;
  const std::ptrdiff_t stride = std::ptrdiff_t{s.c} * s.hw;
  const int groups = s.groups();
#pragma omp parallel for schedule(static) if (parallel(s))
  for (int c = 0; c < s.c; ++c) {
    // invstd rounded as stats stores it, so batch_norm_apply recomputes a frozen layer bit for bit too.
    const A invstd = A(inv_std(running_var[c], eps));
    const double scale = w[c] * double(invstd);
    const std::ptrdiff_t at = std::ptrdiff_t{c} * s.hw;
    affine_runs(y + at, x + at, s.n, stride, s.hw, A(scale), A(b[c] - running_mean[c] * scale),
                epilogue.residual ? epilogue.residual + at : nullptr, epilogue.relu);
    if (stats)
      for (int g = 0; g < groups; ++g) {
        stats[(2 * g) * s.c + c] = running_mean[c];
        stats[(2 * g + 1) * s.c + c] = invstd;
      }
  }
}

// Where a fused backward writes its masked gradient g once, for the passes after the first to read: the
// residual's gradient where there is one, else dx (which the input gradient then overwrites in place);
// null without a ReLU (g is dy) or where neither is wanted.
template <class T> T* masked_gradient(const NormReluGrad<T>& relu, T* dx) {
  if (!relu.y) return nullptr;
  return relu.dresidual ? relu.dresidual : dx;
}

// Channels per block of BatchNorm's backward: a block's runs of one sample are one contiguous stretch of
// memory, visited sample by sample (a channel's runs alone are too short and far apart for the hardware
// prefetcher, with three or four streams of them); blocks split over the threads. Each channel's sums still
// run over its values in sample order, so the bits do not depend on the blocking.
constexpr int kChannelBlock = 8;
int channel_block(int c) { return std::max(1, std::min(kChannelBlock, c / std::max(1, omp_get_max_threads()))); }

template <class T>
void batch_norm_backward(Arith<T>* dw, Arith<T>* db, T* dx, const T* dy, const T* x, const Arith<T>* w,
                         const Arith<T>* stats, const BatchNormShape& s, bool batch_stats, bool accumulate,
                         const NormReluGrad<T>& relu) {
  using A = Arith<T>;
  const std::ptrdiff_t stride = std::ptrdiff_t{s.c} * s.hw;
  const int groups = s.groups(), block = channel_block(s.c), blocks = (s.c + block - 1) / block;
  if (T* g = masked_gradient(relu, dx)) {
    gate_pass(g, dy, relu.y, s);
    batch_norm_backward<T>(dw, db, dx, g, x, w, stats, s, batch_stats, accumulate, {});
    return;
  }
  // From here on dx is null wherever there is a mask: the sums gate dy run by run, on the stack.
  with_write_mode(accumulate, [&](auto acc) {
#pragma omp parallel for schedule(static) if (parallel(s))
    for (int bl = 0; bl < blocks; ++bl) {
      const int c0 = bl * block, nc = std::min(block, s.c - c0);
      double sum_dw[kChannelBlock] = {}, sum_db[kChannelBlock] = {};
      for (int grp = 0; grp < groups; ++grp) {
        const int samples = s.group_size(grp);
        const std::ptrdiff_t at = grp * s.group * stride + std::ptrdiff_t{c0} * s.hw;
        const A* mean = stats + (2 * grp) * s.c + c0;
        const A* invstd = stats + (2 * grp + 1) * s.c + c0;
        Lanes lg[kChannelBlock], lgx[kChannelBlock];  // sums of g and of g * (x - mean) over the group
        for (int r = 0; r < samples; ++r)
          for (int j = 0; j < nc; ++j)
            sums_run(lg[j], lgx[j], dy, x, static_cast<T*>(nullptr), relu.y,
                     at + r * stride + std::ptrdiff_t{j} * s.hw, s.hw, mean[j]);
        A k[kChannelBlock], a[kChannelBlock], slope[kChannelBlock];
        for (int j = 0; j < nc; ++j) {
          const double sdy = lg[j].total(), sdyx = lgx[j].total(), is = invstd[j];
          sum_db[j] += sdy;
          sum_dw[j] += sdyx * is;
          // dx = w invstd (g - mean(g) - xhat mean(g xhat)) with batch statistics, w invstd g without.
          const double count = double(samples) * s.hw, kj = w[c0 + j] * is;
          k[j] = A(kj);
          a[j] = A(batch_stats ? kj * sdy / count : 0.0);
          slope[j] = A(batch_stats ? kj * sdyx * is * is / count : 0.0);
        }
        if (!dx) continue;
        for (int r = 0; r < samples; ++r)
          for (int j = 0; j < nc; ++j)
            dx_run(dx, dy, x, at + r * stride + std::ptrdiff_t{j} * s.hw, s.hw, k[j], a[j], slope[j], A(mean[j]));
      }
      for (int j = 0; j < nc; ++j) {
        put(acc, dw[c0 + j], A(sum_dw[j]));
        put(acc, db[c0 + j], A(sum_db[j]));
      }
    }
  });
}

template <class T>
void group_norm_forward(T* y, Arith<T>* stats, const T* x, const Arith<T>* w, const Arith<T>* b,
                        const GroupNormShape& s, double eps, const NormEpilogue<T>& epilogue) {
  using A = Arith<T>;
  const int cpg = s.c / s.groups;
  const std::ptrdiff_t rows = std::ptrdiff_t{s.n} * s.groups, len = std::ptrdiff_t{cpg} * s.hw;
#pragma omp parallel for schedule(static) if (rows * len > kParallelGrain)
  for (std::ptrdiff_t row = 0; row < rows; ++row) {
    const std::ptrdiff_t sample = row / s.groups, g = row % s.groups;
    const std::ptrdiff_t at = row * len;  // the group's channels are consecutive: one contiguous block
    const Moments mo = moments_of(x + at, cpg, s.hw, s.hw);
    // The affine map from the statistics as stored, as the backward reads them.
    const A mean = A(mo.mean), invstd = A(inv_std(mo.m2 / double(len), eps));
    stats[sample * 2 * s.groups + g] = mean;
    stats[sample * 2 * s.groups + s.groups + g] = invstd;
    for (int j = 0; j < cpg; ++j) {
      const int c = int(g) * cpg + j;
      const double scale = w[c] * double(invstd);
      const std::ptrdiff_t run = at + j * s.hw;
      affine_runs(y + run, x + run, 1, 0, s.hw, A(scale), A(b[c] - mean * scale),
                  epilogue.residual ? epilogue.residual + run : nullptr, epilogue.relu);
    }
  }
}

template <class T>
void group_norm_backward(Arith<T>* dw, Arith<T>* db, T* dx, const T* dy, const T* x, const Arith<T>* w,
                         const Arith<T>* stats, const GroupNormShape& s, bool accumulate,
                         const NormReluGrad<T>& relu) {
  using A = Arith<T>;
  const int cpg = s.c / s.groups;
  const std::ptrdiff_t rows = std::ptrdiff_t{s.n} * s.groups, len = std::ptrdiff_t{cpg} * s.hw;
  const bool threads = rows * len > kParallelGrain;
  auto mean_of = [&](std::ptrdiff_t sample, std::ptrdiff_t g) { return double(stats[sample * 2 * s.groups + g]); };
  auto invstd_of = [&](std::ptrdiff_t sample, std::ptrdiff_t g) {
    return double(stats[sample * 2 * s.groups + s.groups + g]);
  };
  T* gout = masked_gradient(relu, dx);
  // dw, db reduce over samples: a pass split over channels, so no two threads write one channel. It computes
  // the ReLU's mask, once, and writes the masked gradient for the input gradient's pass (each value once,
  // after reading it: it may alias dy).
  with_write_mode(accumulate, [&](auto acc) {
#pragma omp parallel for schedule(static) if (threads)
    for (int c = 0; c < s.c; ++c) {
      const int g = c / cpg;
      double sum_dw = 0, sum_db = 0;
      for (int sample = 0; sample < s.n; ++sample) {
        const std::ptrdiff_t at = (std::ptrdiff_t{sample} * s.c + c) * s.hw;
        const double mean = mean_of(sample, g), invstd = invstd_of(sample, g);
        Lanes la, lb;
        sums_run(la, lb, dy, x, gout, relu.y, at, s.hw, mean);
        sum_db += la.total();
        sum_dw += lb.total() * invstd;
      }
      put(acc, dw[c], A(sum_dw));
      put(acc, db[c], A(sum_db));
    }
  });
  if (!dx) return;
  // Within a group w varies by channel: dx = invstd (g w - mean(g w) - xhat mean(g w xhat)), over (sample,
  // group) rows from the masked gradient (dy without a ReLU), in place where that is dx.
  const T* gin = gout ? gout : dy;
#pragma omp parallel for schedule(static) if (threads)
  for (std::ptrdiff_t row = 0; row < rows; ++row) {
    const std::ptrdiff_t sample = row / s.groups, g = row % s.groups, at = row * len;
    const double mean = mean_of(sample, g), invstd = invstd_of(sample, g);
    double sdyw = 0, sdywx = 0;
    for (int j = 0; j < cpg; ++j) {
      const double wc = w[g * cpg + j];
      Lanes la, lb;
      sums_run(la, lb, gin, x, static_cast<T*>(nullptr), static_cast<const T*>(nullptr), at + j * s.hw, s.hw, mean);
      sdyw += wc * la.total();
      sdywx += wc * lb.total();
    }
    const A a = A(invstd * sdyw / double(len)), slope = A(invstd * invstd * invstd * sdywx / double(len));
    for (int j = 0; j < cpg; ++j)
      dx_run(dx, gin, x, at + j * s.hw, s.hw, A(w[g * cpg + j] * invstd), a, slope, A(mean));
  }
}

#define CRUMB_INSTANTIATE(T)                                                                                  \
  template void batch_norm_forward_train<T>(T*, Arith<T>*, const T*, const Arith<T>*, const Arith<T>*,              \
                                            const BatchNormShape&, double, double*, Arith<T>*, Arith<T>*, int64_t*, \
                                            double, const NormEpilogue<T>&);                                        \
  template void batch_norm_apply<T>(T*, const T*, const Arith<T>*, const Arith<T>*, const Arith<T>*,                \
                                    const BatchNormShape&, const NormEpilogue<T>&);                                 \
  template void batch_norm_forward_frozen<T>(T*, Arith<T>*, const T*, const Arith<T>*, const Arith<T>*,             \
                                             const Arith<T>*, const Arith<T>*, const BatchNormShape&, double,       \
                                             const NormEpilogue<T>&);                                               \
  template void batch_norm_backward<T>(Arith<T>*, Arith<T>*, T*, const T*, const T*, const Arith<T>*,              \
                                       const Arith<T>*, const BatchNormShape&, bool, bool, const NormReluGrad<T>&); \
  template void group_norm_forward<T>(T*, Arith<T>*, const T*, const Arith<T>*, const Arith<T>*,                    \
                                      const GroupNormShape&, double, const NormEpilogue<T>&);                       \
  template void group_norm_backward<T>(Arith<T>*, Arith<T>*, T*, const T*, const T*, const Arith<T>*,              \
                                       const Arith<T>*, const GroupNormShape&, bool, const NormReluGrad<T>&);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
CRUMB_INSTANTIATE(bf16)
CRUMB_INSTANTIATE(f16)
template void batch_norm_commit<float>(float*, float*, int64_t*, const double*, int, double);
template void batch_norm_commit<double>(double*, double*, int64_t*, const double*, int, double);
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
