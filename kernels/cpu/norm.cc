// BatchNorm and GroupNorm on NCHW. A normalisation group's values of one channel are hw-long contiguous
// runs (one per sample), so every loop below is a run of simd-friendly passes over contiguous memory.
// Work splits over channels (BatchNorm: a channel's groups are visited in order, so its running
// statistics and moments are merged in a fixed order) or over (sample, group) rows (GroupNorm):
// results do not depend on the thread count.
#include <cmath>

#include "kernels/cpu/kernel_util.h"
#include "kernels/norm.h"

namespace crumb::cpu {
namespace {
using detail::kParallelGrain;
using detail::load;
using detail::put;
using detail::store;
using detail::with_write_mode;

// Mean and M2 (sum of squared deviations) of `runs` runs of `len` values, run r at x + r * stride.
struct Moments {
  double mean, m2;
};
// A channel's values are runs of hw a whole sample apart: too short for the hardware prefetcher to
// get going on each, so the next run is asked for while this one is summed.
template <class T> void prefetch_run(const T* a, const T* b, int len) {
  constexpr int kLine = 64 / sizeof(T);
  for (int i = 0; i < len; i += kLine) {
    __builtin_prefetch(a + i);
    __builtin_prefetch(b + i);
  }
}

// Runs shorter than this (a ResNet's 4x4 to 1x1 maps) are summed by plain loops: a vectorised
// reduction's set-up and lane sum per run would cost more than the run.
constexpr int kShortRun = 16;

template <class T> Moments moments_of(const T* x, int runs, std::ptrdiff_t stride, int len) {
  double sum = 0;
  for (int r = 0; r < runs; ++r) {
    const T* p = x + r * stride;
    if (len < kShortRun) {
      for (int i = 0; i < len; ++i) sum += load(p[i]);
      continue;
    }
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < len; ++i) sum += load(p[i]);
  }
  const double count = double(runs) * len, mean = sum / count;
  double m2 = 0;
  for (int r = 0; r < runs; ++r) {
    const T* p = x + r * stride;
    if (len < kShortRun) {
      for (int i = 0; i < len; ++i) m2 += (load(p[i]) - mean) * (load(p[i]) - mean);
      continue;
    }
#pragma omp simd reduction(+ : m2)
    for (int i = 0; i < len; ++i) m2 += (load(p[i]) - mean) * (load(p[i]) - mean);
  }
  return {mean, m2};
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

// Where a fused backward lets the gradient through (NormReluGrad), over one run of x at some offset: where
// the forward's pre-activation, computed again from x (and the residual) with the run's affine map and the
// forward's roundings (affine_runs), is > 0; everywhere without a ReLU.
template <class T> struct ReluMask {
  const T *x = nullptr, *res = nullptr;  // x null: no ReLU
  Arith<T> scale = 0, shift = 0;
};
// The gradient reaching the normalisation over `len` values from `from` into g: dy where the mask is open.
// A loop of its own over plain arguments, so that it vectorises (with the mask's fields read through a
// struct inside the sums' loops, the compiler could not).
template <class T>
void gate_run(Arith<T>* g, const T* dy, const ReluMask<T>& m, std::ptrdiff_t from, int len) {
  using A = Arith<T>;
  const T* d = dy + from;
  const T* x = m.x + from;
  const A scale = m.scale, shift = m.shift;
  if (!m.res) {
#pragma omp simd
    for (int i = 0; i < len; ++i) {
      const A v = load(store<T>(load(x[i]) * scale + shift)), di = load(d[i]);
      g[i] = v > A(0) ? di : A(0);
    }
    return;
  }
  const T* r = m.res + from;
#pragma omp simd
  for (int i = 0; i < len; ++i) {
    const A v = load(store<T>(load(store<T>(load(x[i]) * scale + shift)) + load(r[i]))), di = load(d[i]);
    g[i] = v > A(0) ? di : A(0);
  }
}
// The same at one value, for runs too short to be worth a loop of their own (a ResNet's last maps).
template <class T> Arith<T> gate_at(const T* dy, const ReluMask<T>& m, std::ptrdiff_t i) {
  using A = Arith<T>;
  if (!m.x) return load(dy[i]);
  A v = load(store<T>(load(m.x[i]) * m.scale + m.shift));
  if (m.res) v = load(store<T>(v + load(m.res[i])));
  return v > A(0) ? load(dy[i]) : A(0);
}

// The residual's gradient over a run: dr = dy where relu(x * scale + shift + r), rounded as the forward,
// passed (dr may alias dy).
template <class T>
void residual_grad_run(T* dr, const T* dy, const T* x, const T* r, int len, Arith<T> scale, Arith<T> shift) {
  using A = Arith<T>;
#pragma omp simd
  for (int i = 0; i < len; ++i) {
    const A v = load(store<T>(load(store<T>(load(x[i]) * scale + shift)) + load(r[i]))), d = load(dy[i]);
    dr[i] = store<T>(v > A(0) ? d : A(0));
  }
}

// Values per chunk of gate_run's output, on the stack: a feature map of up to 64x64 is one chunk, whose
// sums then run in the unfused backward's order.
constexpr int kGateChunk = 4096;

// sg += sum of g, sgx += sum of g (x - mean) over the run of `len` values at `run`, g the gradient reaching
// the normalisation (dy itself without a ReLU), written to dr there where given.
template <class T>
void sums_run(double& sg, double& sgx, const T* dy, const T* x, T* dr, const ReluMask<T>& m, std::ptrdiff_t run, int len,
              double mean) {
  using A = Arith<T>;
  const T* px = x + run;
  // Short runs (a ResNet's last maps) in a plain loop: a vectorised reduction's set-up per run would cost
  // more than the run.
  if (len < kShortRun) {
    for (int i = 0; i < len; ++i) {
      const A g = gate_at(dy, m, run + i);
      if (dr && m.x) dr[run + i] = store<T>(g);
      sg += g;
      sgx += g * (load(px[i]) - mean);
    }
    return;
  }
  if (!m.x) {
    const T* pdy = dy + run;
#pragma omp simd reduction(+ : sg, sgx)
    for (int i = 0; i < len; ++i) {
      sg += load(pdy[i]);
      sgx += load(pdy[i]) * (load(px[i]) - mean);
    }
    return;
  }
  A g[kGateChunk];
  for (int from = 0; from < len; from += kGateChunk) {
    const int n = std::min(kGateChunk, len - from);
    gate_run(g, dy, m, run + from, n);
    if (dr)
      for (int i = 0; i < n; ++i) dr[run + from + i] = store<T>(g[i]);
    const T* xc = px + from;
#pragma omp simd reduction(+ : sg, sgx)
    for (int i = 0; i < n; ++i) {
      sg += g[i];
      sgx += g[i] * (load(xc[i]) - mean);
    }
  }
}

// dx = k g - a - slope (x - mean) over the run of `len` values at `run`, g as above.
template <class T>
void dx_run(T* dx, const T* dy, const T* x, const ReluMask<T>& m, std::ptrdiff_t run, int len, Arith<T> k, Arith<T> a,
            Arith<T> slope, Arith<T> mean) {
  using A = Arith<T>;
  T* pdx = dx + run;
  const T* px = x + run;
  if (len < kShortRun) {
    for (int i = 0; i < len; ++i) pdx[i] = store<T>(k * gate_at(dy, m, run + i) - a - slope * (load(px[i]) - mean));
    return;
  }
  if (!m.x) {
    const T* pdy = dy + run;
#pragma omp simd
    for (int i = 0; i < len; ++i) pdx[i] = store<T>(k * load(pdy[i]) - a - slope * (load(px[i]) - mean));
    return;
  }
  A g[kGateChunk];
  for (int from = 0; from < len; from += kGateChunk) {
    const int n = std::min(kGateChunk, len - from);
    gate_run(g, dy, m, run + from, n);
    T* d = pdx + from;
    const T* xc = px + from;
#pragma omp simd
    for (int i = 0; i < n; ++i) d[i] = store<T>(k * g[i] - a - slope * (load(xc[i]) - mean));
  }
}

// The mask of a run whose affine map is (scale, shift) (x null: no ReLU).
template <class T> ReluMask<T> relu_mask(const NormReluGrad<T>& r, const T* x, Arith<T> scale, Arith<T> shift) {
  if (!r.bias) return {};
  return {x, r.residual, scale, shift};
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

template <class T>
void batch_norm_backward(Arith<T>* dw, Arith<T>* db, T* dx, const T* dy, const T* x, const Arith<T>* w,
                         const Arith<T>* stats, const BatchNormShape& s, bool batch_stats, bool accumulate,
                         const NormReluGrad<T>& relu) {
  using A = Arith<T>;
  const std::ptrdiff_t stride = std::ptrdiff_t{s.c} * s.hw;
  const int groups = s.groups();
  if (relu.bias && relu.residual) {
    // After a residual add, the masked gradient (the residual's) first, in one pass over (sample, channel)
    // runs in memory order (as residual_pass, for the same reason), then the normalisation's backward
    // from it.
    const std::ptrdiff_t runs = std::ptrdiff_t{s.n} * s.c;
#pragma omp parallel for schedule(static) if (parallel(s))
    for (std::ptrdiff_t run = 0; run < runs; ++run) {
      const int c = static_cast<int>(run % s.c), g = static_cast<int>(run / s.c) / s.group;
      const double mean = stats[(2 * g) * s.c + c], scale = w[c] * double(stats[(2 * g + 1) * s.c + c]);
      const std::ptrdiff_t at = run * s.hw;
      residual_grad_run(relu.dresidual + at, dy + at, x + at, relu.residual + at, s.hw, A(scale),
                        A(relu.bias[c] - mean * scale));
    }
    batch_norm_backward<T>(dw, db, dx, relu.dresidual, x, w, stats, s, batch_stats, accumulate, {});
    return;
  }
  with_write_mode(accumulate, [&](auto acc) {
#pragma omp parallel for schedule(static) if (parallel(s))
    for (int c = 0; c < s.c; ++c) {
      double sum_dw = 0, sum_db = 0;
      for (int g = 0; g < groups; ++g) {
        const int samples = s.group_size(g);
        const std::ptrdiff_t at = g * s.group * stride + std::ptrdiff_t{c} * s.hw;
        const double mean = stats[(2 * g) * s.c + c], invstd = stats[(2 * g + 1) * s.c + c];
        // The forward's affine map (normalize_group), for a mask computed again from x.
        const double scale = relu.bias ? w[c] * invstd : 0.0;
        const A scale_t = A(scale), shift_t = A(relu.bias ? relu.bias[c] - mean * scale : 0.0);
        // The fused ReLU's backward, if any: dy masked once, into dx (its values are needed by the input
        // gradient below, which then overwrites them in place).
        const ReluMask<T> mask = relu_mask(relu, x, scale_t, shift_t);
        double sdy = 0, sdyx = 0;  // sum of dy and of dy * (x - mean) over the group
        for (int r = 0; r < samples; ++r) {
          const std::ptrdiff_t run = at + r * stride;
          const T* pdy = dy + run;
          const T* px = x + run;
          if (r + 1 < samples) prefetch_run(pdy + stride, px + stride, s.hw);
          sums_run(sdy, sdyx, dy, x, dx, mask, run, s.hw, mean);
        }
        sum_db += sdy;
        sum_dw += sdyx * invstd;
        if (!dx) continue;
        // dx = w invstd (dy - mean(dy) - xhat mean(dy xhat)) with batch statistics, w invstd dy without.
        const double count = double(samples) * s.hw, k = w[c] * invstd;
        const A a = A(batch_stats ? k * sdy / count : 0.0);
        const A slope = A(batch_stats ? k * sdyx * invstd * invstd / count : 0.0);
        const A kt = A(k), mt = A(mean);
        for (int r = 0; r < samples; ++r)
          dx_run(dx, mask.x ? dx : dy, x, ReluMask<T>{}, at + r * stride, s.hw, kt, a, slope, mt);
      }
      put(acc, dw[c], A(sum_dw));
      put(acc, db[c], A(sum_db));
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
    // The affine map from the statistics as stored, as a fused backward computes it again (ReluMask).
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

// A fused GroupNorm's mask over channel c of a sample (group_norm_forward's affine map).
template <class T, class A = Arith<T>>
ReluMask<T> gn_mask(const NormReluGrad<T>& r, const T* x, const A* w, const A* stats, const GroupNormShape& s,
                    std::ptrdiff_t sample, int c) {
  if (!r.bias) return {};
  const int g = c / (s.c / s.groups);
  const A mean = stats[sample * 2 * s.groups + g], invstd = stats[sample * 2 * s.groups + s.groups + g];
  const double scale = w[c] * double(invstd);
  return relu_mask(r, x, A(scale), A(r.bias[c] - mean * scale));
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
  if (dx) {
    // Within a group w varies by channel: dx = invstd (dy w - mean(dy w) - xhat mean(dy w xhat)).
#pragma omp parallel for schedule(static) if (threads)
    for (std::ptrdiff_t row = 0; row < rows; ++row) {
      const std::ptrdiff_t sample = row / s.groups, g = row % s.groups, at = row * len;
      const double mean = mean_of(sample, g), invstd = invstd_of(sample, g);
      double sdyw = 0, sdywx = 0;
      for (int j = 0; j < cpg; ++j) {
        const double wc = w[g * cpg + j];
        double a = 0, bsum = 0;
        sums_run(a, bsum, dy, x, static_cast<T*>(nullptr), gn_mask(relu, x, w, stats, s, sample, g * cpg + j), at + j * s.hw,
                 s.hw, mean);
        sdyw += wc * a;
        sdywx += wc * bsum;
      }
      const A a = A(invstd * sdyw / double(len)), slope = A(invstd * invstd * invstd * sdywx / double(len));
      const A mt = A(mean);
      for (int j = 0; j < cpg; ++j) {
        const A k = A(w[g * cpg + j] * invstd);
        dx_run(dx, dy, x, gn_mask(relu, x, w, stats, s, sample, g * cpg + j), at + j * s.hw, s.hw, k, a, slope, mt);
      }
    }
  }
  // dw, db reduce over samples: a second pass split over channels, so no two threads write one channel. It
  // writes the residual's gradient (each value once, after the first pass read it: dresidual may alias dy).
  with_write_mode(accumulate, [&](auto acc) {
#pragma omp parallel for schedule(static) if (threads)
    for (int c = 0; c < s.c; ++c) {
      const int g = c / cpg;
      double sum_dw = 0, sum_db = 0;
      for (int sample = 0; sample < s.n; ++sample) {
        const std::ptrdiff_t at = (std::ptrdiff_t{sample} * s.c + c) * s.hw;
        const double mean = mean_of(sample, g), invstd = invstd_of(sample, g);
        double a = 0, bsum = 0;
        sums_run(a, bsum, dy, x, relu.dresidual, gn_mask(relu, x, w, stats, s, sample, c), at, s.hw, mean);
        sum_db += a;
        sum_dw += bsum * invstd;
      }
      put(acc, dw[c], A(sum_dw));
      put(acc, db[c], A(sum_db));
    }
  });
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
