// BatchNorm and GroupNorm on NCHW. A normalisation group's values of one channel are hw-long contiguous
// runs (one per sample), so every loop below is a run of simd-friendly passes over contiguous memory.
// Work splits over channels or blocks of them (BatchNorm: a channel's groups are visited in order, so its
// running statistics and moments are merged in a fixed order) or over (sample, group) rows (GroupNorm):
// results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <immintrin.h>

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
// Eight floats widened to double. GCC lowers __builtin_convertvector of eight floats to two four-wide
// conversions and a shuffle even where one AVX-512 instruction does it, which cost the sums' loops a third
// of their time (measured).
inline D8 widen8(F8 f) {
#if defined(__AVX512F__)
  return D8(_mm512_maskz_cvtps_pd(0xff, __m256(f)));  // maskz: GCC 12 warns on the unmasked one's undefined
#else
  return __builtin_convertvector(f, D8);
#endif
}
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
    return widen8(f);
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

// Eight values of g = dy where y > 0, else +0 (the ReLU's backward, folded in), in double; also stored to
// gout where given.
template <class T> inline D8 masked8(const T* dy, const T* y, T* gout) {
  if constexpr (std::is_same_v<T, double>) {
    const D8 d = load8(dy), v = load8(y), g = v > 0 ? d : D8{};
    if (gout) std::memcpy(gout, &g, sizeof g);
    return g;
  } else {
    F8 d, v;
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(&d, dy, sizeof d);
      std::memcpy(&v, y, sizeof v);
    } else {
      for (int k = 0; k < 8; ++k) d[k] = load(dy[k]), v[k] = load(y[k]);
    }
    const F8 g = v > 0 ? d : F8{};
    if (gout) {
      if constexpr (std::is_same_v<T, float>) {
        std::memcpy(gout, &g, sizeof g);
      } else {
        const T zero = store<T>(Arith<T>(0));
        for (int k = 0; k < 8; ++k) gout[k] = v[k] > 0 ? dy[k] : zero;  // dy's own bits, NaN payloads too
      }
    }
    return widen8(g);
  }
}
// add_moments of g = dy masked where y > 0 (relu_backward's values), also written to gout where given (it may
// alias dy): one loop over the three streams. Masking into a buffer and summing from it took two loops,
// each streaming part of the data while the other streams' prefetches idled (measured 1.2x the time).
template <class T>
void add_masked_moments(Lanes& s, Lanes& t, const T* dy, const T* y, const T* x, T* gout, int len, double mean) {
  using A = Arith<T>;
  D8 a0 = s.v[0], a1 = s.v[1], b0 = t.v[0], b1 = t.v[1];
  int i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    const D8 g0 = masked8(dy + i, y + i, gout ? gout + i : nullptr);
    const D8 g1 = masked8(dy + i + 8, y + i + 8, gout ? gout + i + 8 : nullptr);
    a0 += g0;
    a1 += g1;
    b0 += g0 * (load8(x + i) - mean);
    b1 += g1 * (load8(x + i + 8) - mean);
  }
  s.v[0] = a0, s.v[1] = a1, t.v[0] = b0, t.v[1] = b1;
  const T zero = store<T>(A(0));
  for (int k = 0; i + k < len; ++k) {
    const T d = dy[i + k], g = load(y[i + k]) > A(0) ? d : zero;  // dy loaded either way: a select, no branch
    if (gout) gout[i + k] = g;
    const double gk = load(g);
    s.add_at(k, gk);
    t.add_at(k, gk * (load(x[i + k]) - mean));
  }
}

// The sums of channel runs of dy, or of dy masked where y > 0 (also written to gout where given), into
// (la, lb): sum of g and of g (x - mean) over the run at `at`.
template <class T>
void run_moments(Lanes& la, Lanes& lb, const T* dy, const T* x, const NormReluGrad<T>& relu, T* gout,
                 std::ptrdiff_t at, int len, double mean) {
  if (relu.y)
    add_masked_moments(la, lb, dy + at, relu.y + at, x + at, gout ? gout + at : nullptr, len, mean);
  else
    add_moments(la, lb, dy + at, x + at, len, mean);
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

// A coefficient of an elementwise map over a run: one value for the whole run, or one per value.
template <class A> inline A coef(A c, int) { return c; }
template <class A> inline A coef(const A* c, int i) { return c[i]; }

// y = x * scale + shift over `len` values, then the fused epilogue: + the residual (res, at x's offsets;
// null: none) and the ReLU, rounded to T after each part as the separate ops round.
template <class T, class C>
void affine_run(T* q, const T* p, int len, C scale, C shift, const T* pr = nullptr, bool relu = false) {
  if (pr && relu) {
#pragma omp simd
    for (int i = 0; i < len; ++i)
      q[i] = store<T>(relu_of(load(store<T>(load(store<T>(load(p[i]) * coef(scale, i) + coef(shift, i))) + load(pr[i])))));
  } else if (pr) {
#pragma omp simd
    for (int i = 0; i < len; ++i) q[i] = store<T>(load(store<T>(load(p[i]) * coef(scale, i) + coef(shift, i))) + load(pr[i]));
  } else if (relu) {
#pragma omp simd
    for (int i = 0; i < len; ++i) q[i] = store<T>(relu_of(load(store<T>(load(p[i]) * coef(scale, i) + coef(shift, i)))));
  } else {
#pragma omp simd
    for (int i = 0; i < len; ++i) q[i] = store<T>(load(p[i]) * coef(scale, i) + coef(shift, i));
  }
}

// dx = k g - a - slope (x - mean) over the run of `len` values at `run` (dx may alias g); the coefficients
// one per run or one per value (coef).
template <class T, class C>
void dx_run(T* dx, const T* g, const T* x, std::ptrdiff_t run, int len, C k, C a, C slope, C mean) {
  T* pdx = dx + run;
  const T* pg = g + run;
  const T* px = x + run;
#pragma omp simd
  for (int i = 0; i < len; ++i)
    pdx[i] = store<T>(coef(k, i) * load(pg[i]) - coef(a, i) - coef(slope, i) * (load(px[i]) - coef(mean, i)));
}

// The same with g = dy masked where y > 0, computed again from dy and y.
template <class T, class C>
void dx_run_masked(T* dx, const T* dy, const T* y, const T* x, std::ptrdiff_t run, int len, C k, C a, C slope,
                   C mean) {
  using A = Arith<T>;
  T* pdx = dx + run;
  const T* pg = dy + run;
  const T* py = y + run;
  const T* px = x + run;
  // dy loaded whatever the mask: a load under the condition kept the loop from vectorising (2.7x the time).
#pragma omp simd
  for (int i = 0; i < len; ++i) {
    const A d = load(pg[i]), g = load(py[i]) > A(0) ? d : A(0);
    pdx[i] = store<T>(coef(k, i) * g - coef(a, i) - coef(slope, i) * (load(px[i]) - coef(mean, i)));
  }
}

// dx over the run at `at` from the gradient reaching the normalisation: gres where the first pass wrote it
// (the residual's gradient), else dy masked again where y > 0, else dy.
template <class T, class C>
void dx_of_run(T* dx, const T* dy, const T* x, const NormReluGrad<T>& relu, const T* gres, std::ptrdiff_t at,
               int len, C k, C a, C slope, C mean) {
  if (relu.y && !gres)
    dx_run_masked(dx, dy, relu.y, x, at, len, k, a, slope, mean);
  else
    dx_run(dx, gres ? gres : dy, x, at, len, k, a, slope, mean);
}

double inv_std(double var, double eps) { return 1.0 / std::sqrt(var + eps); }

bool parallel(const BatchNormShape& s) { return std::ptrdiff_t{s.n} * s.c * s.hw > kParallelGrain; }

// BatchNorm's passes walk blocks of channels, group by group, and a block's runs of one sample are one
// contiguous stretch of memory, visited sample by sample: a channel's runs alone are short and a sample
// apart, which the hardware prefetchers follow badly (a prefetch stream starts over at each run; the
// per-channel forward ran at a third of a copy's rate from DRAM, kernels_bench --cold). So blocks are as
// wide as the threads allow: measured on resnet20's shapes, each halving of the stretch cost more than a
// block's values staying in L2 for the later passes saved. Only a block whose values of one group, in the
// streams a later pass reads again, would pass kBlockBytes (a quarter of a 32 MiB L3) is narrower, so
// those passes find them in L3 rather than DRAM. Blocks split over the threads. Each channel's sums still
// run over its values in sample order, so the bits do not depend on the blocking or the thread count.
constexpr int kMaxBlock = 128;
constexpr std::size_t kBlockBytes = std::size_t(8) << 20;
// Runs no longer than the lanes (feature maps of 1 to 16 values: a ResNet's last stages): value i of a run
// goes to lane i, so a block's lanes are the positions of a sample's stretch (nc runs of hw values), and
// sums over the stretch position by position, in sample order, are the lanes' own. The passes then run
// over whole stretches, vectorised across channels, with the per-channel coefficients spread over the
// positions: per run, a loop and its scalar tail for 1 to 16 values made BatchNorm's passes several times
// slower there, and the mask's compare in that tail a branch (the fused backward 1.2x the unfused pair).
constexpr int kShortStretch = 1024;  // a block's positions, on the stack
bool short_runs(const BatchNormShape& s) { return s.hw <= kLanes; }
// The lanes of a channel from its positions' sums (hw <= kLanes of them).
Lanes lanes_at(const double* sums, int hw) {
  Lanes l;
  for (int i = 0; i < hw; ++i) l.v[i / 8][i % 8] = sums[i];
  return l;
}
// v[j * hw + i] = per_channel[j] for every position i of channel j < nc.
template <class V, class W> void spread(V* v, const W* per_channel, int nc, int hw) {
  for (int j = 0; j < nc; ++j)
    for (int i = 0; i < hw; ++i) v[j * hw + i] = V(per_channel[j]);
}

// Channels per block where `streams` tensors of `value_bytes` values are read again by a later pass.
int channel_block(const BatchNormShape& s, int streams, std::size_t value_bytes) {
  const std::size_t per_channel = std::size_t(std::min(s.group, s.n)) * s.hw * value_bytes * streams;
  int block = int(std::clamp<std::size_t>(kBlockBytes / std::max<std::size_t>(1, per_channel), 1, kMaxBlock));
  if (short_runs(s)) block = std::min(block, kShortStretch / s.hw);
  if (parallel(s)) block = std::min(block, (s.c + omp_get_max_threads() - 1) / omp_get_max_threads());
  return std::min(block, s.c);
}

// Calls f(j, at) for the run of channel c0 + j (j < nc) of every sample of group g, at offset `at`, in
// memory order.
template <class F> void for_runs(const BatchNormShape& s, int c0, int nc, int g, F&& f) {
  const std::ptrdiff_t stride = std::ptrdiff_t{s.c} * s.hw, at = g * s.group * stride + std::ptrdiff_t{c0} * s.hw;
  const int samples = s.group_size(g);
  for (int r = 0; r < samples; ++r)
    for (int j = 0; j < nc; ++j) f(j, at + r * stride + std::ptrdiff_t{j} * s.hw);
}

// Calls f(at) for the stretch of the block's runs (nc * hw values from offset `at`) of every sample of group
// g, in order.
template <class F> void for_stretches(const BatchNormShape& s, int c0, int g, F&& f) {
  const std::ptrdiff_t stride = std::ptrdiff_t{s.c} * s.hw, at = g * s.group * stride + std::ptrdiff_t{c0} * s.hw;
  const int samples = s.group_size(g);
  for (int r = 0; r < samples; ++r) f(at + r * stride);
}

// Calls body(c0, nc) for every block of `block` channels, split over the threads.
template <class F> void for_blocks(const BatchNormShape& s, int block, F&& body) {
  const int blocks = (s.c + block - 1) / block;
#pragma omp parallel for schedule(static) if (parallel(s))
  for (int bl = 0; bl < blocks; ++bl) body(bl * block, std::min(block, s.c - bl * block));
}

// y = x * scale[j] + shift[j] over the block's runs of group g, with the epilogue (affine_run).
template <class T>
void apply_block(T* y, const T* x, const BatchNormShape& s, int c0, int nc, int g, const Arith<T>* scale,
                 const Arith<T>* shift, const NormEpilogue<T>& e) {
  if (short_runs(s)) {
    Arith<T> sc[kShortStretch], sh[kShortStretch];
    spread(sc, scale, nc, s.hw);
    spread(sh, shift, nc, s.hw);
    const Arith<T>*psc = sc, *psh = sh;
    for_stretches(s, c0, g, [&](std::ptrdiff_t at) {
      affine_run(y + at, x + at, nc * s.hw, psc, psh, e.residual ? e.residual + at : nullptr, e.relu);
    });
    return;
  }
  for_runs(s, c0, nc, g, [&](int j, std::ptrdiff_t at) {
    affine_run(y + at, x + at, s.hw, scale[j], shift[j], e.residual ? e.residual + at : nullptr, e.relu);
  });
}

// mean[j] and m2[j] (sum of squared deviations from it) of the block's channels over group g: two passes.
template <class T>
void block_moments(double* mean, double* m2, const T* x, const BatchNormShape& s, int c0, int nc, int g) {
  const double count = double(s.group_size(g)) * s.hw;
  if (short_runs(s)) {
    const int n = nc * s.hw;
    double sum[kShortStretch] = {}, at_mean[kShortStretch];
    for_stretches(s, c0, g, [&](std::ptrdiff_t at) {
      for (int i = 0; i < n; ++i) sum[i] += load(x[at + i]);
    });
    for (int j = 0; j < nc; ++j) mean[j] = lanes_at(sum + j * s.hw, s.hw).total() / count;
    spread(at_mean, mean, nc, s.hw);
    std::fill_n(sum, n, 0.0);
    // std::fma: add_squares' tail, which these sums are, contracts (d * d) + sum so.
    for_stretches(s, c0, g, [&](std::ptrdiff_t at) {
      for (int i = 0; i < n; ++i) {
        const double d = load(x[at + i]) - at_mean[i];
        sum[i] = std::fma(d, d, sum[i]);
      }
    });
    for (int j = 0; j < nc; ++j) m2[j] = lanes_at(sum + j * s.hw, s.hw).total();
    return;
  }
  Lanes lanes[kMaxBlock];
  for_runs(s, c0, nc, g, [&](int j, std::ptrdiff_t at) { add_values(lanes[j], x + at, s.hw); });
  for (int j = 0; j < nc; ++j) mean[j] = lanes[j].total() / count, lanes[j] = {};
  for_runs(s, c0, nc, g, [&](int j, std::ptrdiff_t at) { add_squares(lanes[j], x + at, s.hw, mean[j]); });
  for (int j = 0; j < nc; ++j) m2[j] = lanes[j].total();
}

// The sums of g and of g (x - mean[j]) over group g of the block's channels, into lg[j], lgx[j]; g is dy,
// or dy masked where y > 0 (written to gres where given).
template <class T>
void block_grad_sums(Lanes* lg, Lanes* lgx, const T* dy, const T* x, const NormReluGrad<T>& relu, T* gres,
                     const Arith<T>* mean, const BatchNormShape& s, int c0, int nc, int g) {
  using A = Arith<T>;
  if (short_runs(s)) {
    const int n = nc * s.hw;
    double sg[kShortStretch] = {}, sgx[kShortStretch] = {}, at_mean[kShortStretch];
    spread(at_mean, mean, nc, s.hw);
    const T* y = relu.y;
    const T zero = store<T>(A(0));
    T masked[kShortStretch];  // where the residual's gradient is not wanted
    // The mask in a loop of its own, into the residual's gradient or the stack, then the sums from there (in
    // one loop, the mask's select on T beside the sums in double kept GCC from vectorising for float and
    // the 16-bit types). std::fma: add_moments' tail, which these sums are, contracts g (x - mean) + sum so.
    for_stretches(s, c0, g, [&](std::ptrdiff_t at) {
      const T* gs = dy + at;
      if (y) {
        T* gd = gres ? gres + at : masked;
        for (int i = 0; i < n; ++i) gd[i] = load(y[at + i]) > A(0) ? dy[at + i] : zero;
        gs = gd;
      }
      for (int i = 0; i < n; ++i) {
        const double gi = load(gs[i]);
        sg[i] += gi;
        sgx[i] = std::fma(gi, load(x[at + i]) - at_mean[i], sgx[i]);
      }
    });
    for (int j = 0; j < nc; ++j) lg[j] = lanes_at(sg + j * s.hw, s.hw), lgx[j] = lanes_at(sgx + j * s.hw, s.hw);
    return;
  }
  for_runs(s, c0, nc, g, [&](int j, std::ptrdiff_t at) { run_moments(lg[j], lgx[j], dy, x, relu, gres, at, s.hw, double(mean[j])); });
}

// dx over group g of the block's channels from their coefficients (dx_of_run).
template <class T>
void block_dx(T* dx, const T* dy, const T* x, const NormReluGrad<T>& relu, const T* gres, const Arith<T>* k,
              const Arith<T>* a, const Arith<T>* slope, const Arith<T>* mean, const BatchNormShape& s, int c0, int nc,
              int g) {
  using A = Arith<T>;
  if (short_runs(s)) {
    A sk[kShortStretch], sa[kShortStretch], ss[kShortStretch], sm[kShortStretch];
    spread(sk, k, nc, s.hw);
    spread(sa, a, nc, s.hw);
    spread(ss, slope, nc, s.hw);
    spread(sm, mean, nc, s.hw);
    const A *pk = sk, *pa = sa, *ps = ss, *pm = sm;
    for_stretches(s, c0, g, [&](std::ptrdiff_t at) { dx_of_run(dx, dy, x, relu, gres, at, nc * s.hw, pk, pa, ps, pm); });
    return;
  }
  for_runs(s, c0, nc, g, [&](int j, std::ptrdiff_t at) { dx_of_run(dx, dy, x, relu, gres, at, s.hw, k[j], a[j], slope[j], mean[j]); });
}

// The affine map of channel c from its statistics as stored (rounded to Arith<T>): batch_norm_apply
// recomputes the training forward's output bit for bit from them.
template <class A> void affine_of(A* scale, A* shift, const A* w, const A* b, A mean, A invstd, int c) {
  const double k = w[c] * double(invstd);
  *scale = A(k);
  *shift = A(b[c] - double(mean) * k);
}

}  // namespace

template <class T>
void batch_norm_forward_train(T* y, Arith<T>* stats, const T* x, const Arith<T>* w, const Arith<T>* b,
                              const BatchNormShape& s, double eps, double* moments, Arith<T>* running_mean,
                              Arith<T>* running_var, int64_t* tracked, double momentum,
                              const NormEpilogue<T>& epilogue) {
  using A = Arith<T>;
  if (s.n == 0) return;
  const int groups = s.groups();
  for_blocks(s, channel_block(s, 1, sizeof(T)), [&](int c0, int nc) {
    for (int g = 0; g < groups; ++g) {
      const double count = double(s.group_size(g)) * s.hw;
      double mean[kMaxBlock], m2s[kMaxBlock];
      block_moments(mean, m2s, x, s, c0, nc, g);
      A scale[kMaxBlock], shift[kMaxBlock];
      for (int j = 0; j < nc; ++j) {
        const int c = c0 + j;
        const double m2 = m2s[j];
        A* mean_at = stats + (2 * g) * s.c + c;
        A* invstd_at = stats + (2 * g + 1) * s.c + c;
        *mean_at = A(mean[j]);
        *invstd_at = A(inv_std(m2 / count, eps));
        affine_of(scale + j, shift + j, w, b, *mean_at, *invstd_at, c);
        if (moments) {  // Chan et al.: merge (count, mean, m2) of the group into the channel's running total
          double& n_a = moments[c];
          double& mean_a = moments[s.c + c];
          double& m2_a = moments[2 * s.c + c];
          const double total = n_a + count, delta = mean[j] - mean_a;
          mean_a += delta * (count / total);
          m2_a += m2 + delta * delta * (n_a * count / total);
          n_a = total;
        }
        if (running_mean) {
          running_mean[c] = A((1 - momentum) * running_mean[c] + momentum * mean[j]);
          running_var[c] = A((1 - momentum) * running_var[c] + momentum * (count > 1 ? m2 / (count - 1) : 0.0));
        }
      }
      apply_block(y, x, s, c0, nc, g, scale, shift, epilogue);
    }
  });
  if (running_mean) *tracked += groups;
}

template <class T>
void batch_norm_apply(T* y, const T* x, const Arith<T>* w, const Arith<T>* b, const Arith<T>* stats,
                      const BatchNormShape& s, const NormEpilogue<T>& epilogue) {
  using A = Arith<T>;
  if (s.n == 0) return;
  const int groups = s.groups();
  for_blocks(s, channel_block(s, 1, sizeof(T)), [&](int c0, int nc) {
    for (int g = 0; g < groups; ++g) {
      A scale[kMaxBlock], shift[kMaxBlock];
      for (int j = 0; j < nc; ++j)
        affine_of(scale + j, shift + j, w, b, stats[(2 * g) * s.c + c0 + j], stats[(2 * g + 1) * s.c + c0 + j], c0 + j);
      apply_block(y, x, s, c0, nc, g, scale, shift, epilogue);
    }
  });
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
  using A = Arith<T>;
  if (s.n == 0) return;
  const int groups = s.groups();
  // invstd rounded as stats stores it, so batch_norm_apply recomputes a frozen layer bit for bit too.
  if (stats)
    for (int c = 0; c < s.c; ++c)
      for (int g = 0; g < groups; ++g) {
        stats[(2 * g) * s.c + c] = running_mean[c];
        stats[(2 * g + 1) * s.c + c] = A(inv_std(running_var[c], eps));
      }
  for_blocks(s, channel_block(s, 1, sizeof(T)), [&](int c0, int nc) {
    A scale[kMaxBlock], shift[kMaxBlock];
    for (int j = 0; j < nc; ++j)
      affine_of(scale + j, shift + j, w, b, running_mean[c0 + j], A(inv_std(running_var[c0 + j], eps)), c0 + j);
    for (int g = 0; g < groups; ++g) apply_block(y, x, s, c0, nc, g, scale, shift, epilogue);
  });
}

// Two passes per block and group: the sums of g and g (x - mean) per channel, then dx from them. g is dy,
// or with a ReLU dy masked where y > 0 in the sums' loop, written there where it is kept: the residual's
// gradient where that is wanted, or dx where dx takes dy's storage (in place: the same lines, already
// fetched); the second pass reads it back from there, or else computes it again from dy and y (writing it
// to a dx of its own in the first pass and reading it back measured slower: dx's lines fetched twice).
template <class T>
void batch_norm_backward(Arith<T>* dw, Arith<T>* db, T* dx, const T* dy, const T* x, const Arith<T>* w,
                         const Arith<T>* stats, const BatchNormShape& s, bool batch_stats, bool accumulate,
                         const NormReluGrad<T>& relu) {
  using A = Arith<T>;
  T* gres = relu.y ? (relu.dresidual ? relu.dresidual : dx == dy ? dx : nullptr) : nullptr;
  with_write_mode(accumulate, [&](auto acc) {
    if (s.n == 0) {
      for (int c = 0; c < s.c; ++c) put(acc, dw[c], A(0)), put(acc, db[c], A(0));
      return;
    }
    const int groups = s.groups();
    for_blocks(s, channel_block(s, 2, sizeof(T)), [&](int c0, int nc) {
      double sum_dw[kMaxBlock] = {}, sum_db[kMaxBlock] = {};
      for (int grp = 0; grp < groups; ++grp) {
        const int samples = s.group_size(grp);
        const A* mean = stats + (2 * grp) * s.c + c0;
        const A* invstd = stats + (2 * grp + 1) * s.c + c0;
        Lanes lg[kMaxBlock], lgx[kMaxBlock];  // sums of g and of g * (x - mean) over the group
        block_grad_sums(lg, lgx, dy, x, relu, gres, mean, s, c0, nc, grp);
        A k[kMaxBlock], a[kMaxBlock], slope[kMaxBlock];
        for (int j = 0; j < nc; ++j) {
          const double sdy = lg[j].total(), sdyx = lgx[j].total(), is = invstd[j];
          sum_db[j] += sdy;
          // std::fma: GCC contracts a * b + c into one at its discretion (-ffp-contract=fast), and did in one
          // of two paths computing the same sum here; written out, every path rounds once, as this always did.
          sum_dw[j] = std::fma(sdyx, is, sum_dw[j]);
          // dx = w invstd (g - mean(g) - xhat mean(g xhat)) with batch statistics, w invstd g without.
          const double count = double(samples) * s.hw, kj = w[c0 + j] * is;
          k[j] = A(kj);
          a[j] = A(batch_stats ? kj * sdy / count : 0.0);
          slope[j] = A(batch_stats ? kj * sdyx * is * is / count : 0.0);
        }
        if (dx) block_dx(dx, dy, x, relu, gres, k, a, slope, mean, s, c0, nc, grp);
      }
      for (int j = 0; j < nc; ++j) {
        put(acc, dw[c0 + j], A(sum_dw[j]));
        put(acc, db[c0 + j], A(sum_db[j]));
      }
    });
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
      affine_run(y + run, x + run, s.hw, A(scale), A(b[c] - mean * scale),
                  epilogue.residual ? epilogue.residual + run : nullptr, epilogue.relu);
    }
  }
}

// Channels of a GroupNorm backward task's groups: its dw and db sums, in double, on the stack.
constexpr int kMaxGroupChannels = 512;

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
  // The masked gradient is written where it is wanted (the residual's gradient); dx is computed from dy and
  // y again.
  T* gres = relu.y ? relu.dresidual : nullptr;
  // The (sample, group) row, a contiguous block: its channels' sums (each run's passed to part(c, sum of g,
  // sum of g (x - mean), invstd) for dw and db; the masked gradient written to gwrite where given), then its
  // dx = invstd (g w - mean(g w) - xhat mean(g w xhat)) while the row is still in L1 or L2 (within a group
  // w varies by channel).
  auto row = [&](std::ptrdiff_t sample, int g, T* gwrite, auto&& part) {
    const std::ptrdiff_t at = (sample * s.groups + g) * len;
    const double mean = mean_of(sample, g), invstd = invstd_of(sample, g);
    double sdyw = 0, sdywx = 0;
    for (int j = 0; j < cpg; ++j) {
      const int c = g * cpg + j;
      Lanes la, lb;
      run_moments(la, lb, dy, x, relu, gwrite, at + j * s.hw, s.hw, mean);
      const double ta = la.total(), tb = lb.total();
      part(c, ta, tb, invstd);
      sdyw = std::fma(w[c], ta, sdyw);  // std::fma: as BatchNorm's sum_dw
      sdywx = std::fma(w[c], tb, sdywx);
    }
    if (!dx) return;
    const A a = A(invstd * sdyw / double(len)), slope = A(invstd * invstd * invstd * sdywx / double(len));
    for (int j = 0; j < cpg; ++j)
      dx_of_run(dx, dy, x, relu, gres, at + j * s.hw, s.hw, A(w[g * cpg + j] * invstd), a, slope, A(mean));
  };
  const int workers = threads ? omp_get_max_threads() : 1;
  with_write_mode(accumulate, [&](auto acc) {
    if (cpg <= kMaxGroupChannels && s.groups >= workers) {
      // One pass over the rows, whose runs' parts of dw and db add up in sample order: tasks take whole
      // groups, so each channel's sums stay in one thread, and walk their groups' rows sample by sample, a
      // contiguous stretch per sample.
      const int per = std::max(1, std::min(kMaxGroupChannels / cpg, s.groups / workers));
      const int tasks = (s.groups + per - 1) / per;
#pragma omp parallel for schedule(static) if (threads)
      for (int task = 0; task < tasks; ++task) {
        const int g0 = task * per, g1 = std::min(s.groups, g0 + per), c0 = g0 * cpg;
        double sum_dw[kMaxGroupChannels] = {}, sum_db[kMaxGroupChannels] = {};
        for (int sample = 0; sample < s.n; ++sample)
          for (int g = g0; g < g1; ++g)
            row(sample, g, gres, [&](int c, double ta, double tb, double invstd) {
              sum_db[c - c0] += ta;
              sum_dw[c - c0] = std::fma(tb, invstd, sum_dw[c - c0]);
            });
        for (int c = c0; c < g1 * cpg; ++c) {
          put(acc, dw[c], A(sum_dw[c - c0]));
          put(acc, db[c], A(sum_db[c - c0]));
        }
      }
      return;
    }
    // Fewer groups than threads, or more channels per group than a task holds: dw and db in a pass split
    // over channels (which writes the residual's gradient), then the rows.
#pragma omp parallel for schedule(static) if (threads)
    for (int c = 0; c < s.c; ++c) {
      const int g = c / cpg;
      double sum_dw = 0, sum_db = 0;
      for (int sample = 0; sample < s.n; ++sample) {
        Lanes la, lb;
        run_moments(la, lb, dy, x, relu, gres, (std::ptrdiff_t{sample} * s.c + c) * s.hw, s.hw, mean_of(sample, g));
        sum_db += la.total();
        sum_dw = std::fma(lb.total(), invstd_of(sample, g), sum_dw);
      }
      put(acc, dw[c], A(sum_dw));
      put(acc, db[c], A(sum_db));
    }
    if (!dx) return;
#pragma omp parallel for schedule(static) if (threads)
    for (std::ptrdiff_t r = 0; r < rows; ++r) row(r / s.groups, int(r % s.groups), nullptr, [](int, double, double, double) {});
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
