// BatchNorm and GroupNorm on NCHW tensors of float or 16-bit values (loaded as float): the twins of
// kernels/cpu/norm.cc. Statistics are accumulated in double, from deviations from a mean (never
// E[x^2] - E[x]^2); parameters, their gradients, stats and running statistics are float32 (moments
// double) whatever the activations' storage type.
// Every reduction is a fixed-order sum, without atomics, so results are deterministic:
// - BatchNorm: each (group, channel) split into ranges fixed by the shape, reduced by blocks (one channel
//   each on NCHW, a tile of channels on NHWC) in two passes per range (its mean, then its squared
//   deviations) into a workspace; one thread per channel merges the ranges in order and then the groups
//   in order, so moments and running statistics are merged in the CPU's order. y and dx are then a grid
//   over all values, 4 at a time where aligned;
// - GroupNorm: one block per (sample, group) row for the forward and the input gradient (a row is
//   contiguous), and one block per channel for the weight and bias gradients (a sum over samples).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "engine/base/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/norm.h"

namespace crumb::cuda {
namespace {
using detail::blocks_for;
using detail::global_index;
using detail::kBlock;
using detail::kWarp;
using detail::nchw_count;
using detail::put;
using detail::warp_sum;

// A channel's block streams a whole group (or batch) of feature maps per pass, so it is large for
// enough loads in flight. A GroupNorm row is c / groups feature maps of one sample, often short, and
// there are n * groups of them, so its block is smaller. Both are warp multiples.
constexpr int kChannelBlock = 512;
constexpr int kRowBlock = 256;

struct Sums {
  double a, b;
};

// Sums a and b over the block; every thread gets both totals. blockDim.x is a warp multiple of at most
// kChannelBlock, and every thread of the block must call it. Successive calls need no barrier between
// them: a later call writes `partial` only after this call's second barrier, which warp 0 passes after
// reading it, and writes `total` only after its own first barrier, which every thread passes after
// reading this call's totals.
__device__ Sums block_sums(double a, double b) {
  __shared__ double partial[2][kChannelBlock / kWarp];
  __shared__ double total[2];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  a = warp_sum(a);
  b = warp_sum(b);
  if (lane == 0) {
    partial[0][warp] = a;
    partial[1][warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    const bool live = lane < static_cast<int>(blockDim.x / kWarp);
    a = warp_sum(live ? partial[0][lane] : 0.0);
    b = warp_sum(live ? partial[1][lane] : 0.0);
    if (lane == 0) {
      total[0] = a;
      total[1] = b;
    }
  }
  __syncthreads();
  return {total[0], total[1]};
}

__device__ double block_sum(double v) { return block_sums(v, 0.0).a; }

// Offsets of the values of one channel over consecutive samples: runs of hw values (one per sample),
// c * hw apart. Element e of the flattened runs is at at(e) from the first.
struct ChannelRuns {
  std::size_t hw, stride;
  __device__ std::size_t at(std::size_t e) const {
    const std::size_t r = e / hw;
    return r * stride + (e - r * hw);
  }
};

__device__ double inv_std(double var, double eps) { return 1.0 / sqrt(var + eps); }

// a / b in 32 bits where a fits (almost always): a 64-bit division costs several times as much.
__device__ __forceinline__ std::size_t quotient(std::size_t a, unsigned b) {
  return a >> 32 ? a / b : static_cast<unsigned>(a) / b;
}

// V consecutive activations, loaded and stored as one access where V > 1 (the launchers check alignment).
template <class T, int V> struct alignas(sizeof(T) * V) Pack {
  T v[V];
};
template <class T, int V> __device__ __forceinline__ Pack<T, V> load(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}
template <class T, int V> __device__ __forceinline__ void store(T* p, const Pack<T, V>& v) {
  *reinterpret_cast<Pack<T, V>*>(p) = v;
}

// The fused epilogue of a normalised value v (kernels/norm.h, NormEpilogue): + the residual at i and the
// ReLU, rounded to T after each part as the separate ops round.
template <class T> __device__ __forceinline__ T epilogue(float v, const T* res, bool relu, std::size_t i) {
  T out = from_float<T>(v);
  if (res) out = from_float<T>(to_float(out) + to_float(res[i]));
  if (relu && to_float(out) <= 0.0f) out = from_float<T>(0.0f);
  return out;
}

// ---- BatchNorm. The reductions (statistics, weight gradients) split each (group, channel) into `splits`
// ranges of about kSplitElems values, one block each, which writes its Partial to the workspace; one
// thread per channel then combines a channel's partials in split order and its groups in group order.
// The splits depend on the shape alone, so results do not depend on the device. NCHW: a block reduces one
// channel's range. NHWC: a block reduces a tile of kWarp consecutive channels over a range of positions,
// lanes on channels (so a warp's loads are one run of memory) and each warp every kTileRows-th position.
// The elementwise passes (y, dx) are a separate grid over all values.
constexpr std::size_t kSplitElems = 8192;
constexpr std::size_t kMaxSplits = 4096;
constexpr int kSplitBlock = 256;
constexpr int kTileRows = kSplitBlock / kWarp;
// Blocks of a grid-stride elementwise pass at most.
constexpr std::size_t kMaxMapBlocks = 1 << 16;

// One split's sums: forward (count, mean, M2 of its values); backward (count, sum dy, sum dy (x - mean)).
struct Partial {
  double count, a, b;
};
// The input gradient's affine map of one (group, channel): dx = k dy - a - slope (x - mean).
struct Coeff {
  float k, a, slope, mean;
};

// Splits of a group's values of a channel (NCHW) or its positions (NHWC, for a tile of kWarp channels).
int bn_splits(const cpu::BatchNormShape& s) {
  const std::size_t per_group = static_cast<std::size_t>(s.group) * s.hw;
  const std::size_t per_split = s.layout == Layout::NHWC ? kSplitElems / kWarp : kSplitElems;
  return static_cast<int>(std::min((per_group + per_split - 1) / per_split, kMaxSplits));
}

std::size_t bn_partials(const cpu::BatchNormShape& s) {
  return s.n == 0 ? 0 : static_cast<std::size_t>(s.groups()) * s.c * bn_splits(s);
}

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// Chan et al.: merges (n_b, mean_b, m2_b) into the running (n_a, mean_a, m2_a).
__device__ void chan_merge(double& n_a, double& mean_a, double& m2_a, double n_b, double mean_b, double m2_b) {
  if (n_b == 0) return;  // an empty split of a short last group
  const double total = n_a + n_b, delta = mean_b - mean_a;
  mean_a += delta * (n_b / total);
  m2_a += m2_b + delta * delta * (n_a * n_b / total);
  n_a = total;
}

// Index of group g's mean in stats [groups][2][c]; its invstd is c further.
__device__ std::size_t stats_index(const cpu::BatchNormShape& s, int g, int c) {
  return static_cast<std::size_t>(2 * g) * s.c + c;
}

// The affine map of channel c from its statistics as stats stores them (rounded to float), so that
// batch_norm_apply recomputes the training forward's output bit for bit.
struct ScaleShift {
  float scale, shift;
};
// The shift's rounding is explicit (one fma), so that every inlined copy (the training forward, the frozen
// one, batch_norm_apply, GroupNorm's) computes the same bits whatever the compiler contracts.
__device__ ScaleShift scale_shift(float w, float b, float mean, float invstd) {
  const double scale = w * static_cast<double>(invstd);
  return {static_cast<float>(scale), static_cast<float>(__fma_rn(-static_cast<double>(mean), scale, b))};
}
// x under the affine map, one rounding (an explicit fma: the forward and its recomputation round alike).
__device__ __forceinline__ float affine(float x, ScaleShift a) { return __fmaf_rn(x, a.scale, a.shift); }

// The gradient reaching the normalisation at i, where dy holds d: d where the fused forward's output is
// > 0 (NormReluGrad), d itself without a ReLU (y null).
template <class T> __device__ __forceinline__ float masked(const T* y, T d, std::size_t i) {
  return !y || to_float(y[i]) > 0.0f ? to_float(d) : 0.0f;
}

// Split k of (group g, channel ch) of an NCHW tensor, in units of V values: the channel's values in a
// group are runs of `run` units (a feature map) `stride` values apart; the split covers units
// [u0, u0 + len) of them, and unit j of it is at(j) from x.
struct SplitRange {
  std::size_t first, stride, r0;
  unsigned run, q0, len;
  template <int V> __device__ std::size_t at(unsigned j) const {
    const unsigned q = q0 + j, r = q / run;
    return first + (r0 + r) * stride + static_cast<std::size_t>(q - r * run) * V;
  }
};
// Units [u0, u0 + len) of split k of `units` (a group's share of splits of the full group's units).
struct Span {
  std::size_t u0;
  unsigned len;
};
__device__ Span split_span(std::size_t units, std::size_t full, int k, int splits) {
  const std::size_t per_split = (full + splits - 1) / splits, start = k * per_split,
                    u0 = start < units ? start : units;
  return {u0, static_cast<unsigned>(units - u0 < per_split ? units - u0 : per_split)};
}
template <int V> __device__ SplitRange split_range(const cpu::BatchNormShape& s, int g, int ch, int k, int splits) {
  const unsigned run = static_cast<unsigned>(s.hw / V);
  const Span span = split_span(static_cast<std::size_t>(min(s.group, s.n - g * s.group)) * run,
                               static_cast<std::size_t>(s.group) * run, k, splits);
  const std::size_t r0 = span.u0 / run;
  return {static_cast<std::size_t>(g) * s.group * s.c * s.hw + static_cast<std::size_t>(ch) * s.hw,
          static_cast<std::size_t>(s.c) * s.hw, r0, run, static_cast<unsigned>(span.u0 - r0 * run), span.len};
}

// Block (ch * splits + k, g): its split's Partial. Forward (dy null): two passes over the split, the mean
// and then the squared deviations from it, in double. Backward: sum dy and dy (x - mean) with the group's
// mean from stats.
template <class T, int V>
__global__ void __launch_bounds__(kSplitBlock)
    batch_norm_partial_kernel(Partial* partials, const T* x, const T* dy, const float* stats,
                              cpu::BatchNormShape s, int splits, NormReluGrad<T> relu) {
  const int ch = blockIdx.x / splits, k = blockIdx.x - ch * splits, g = blockIdx.y;
  const SplitRange r = split_range<V>(s, g, ch, k, splits);
  const double count = static_cast<double>(r.len) * V;
  Partial p{count, 0, 0};
  if (dy) {
    const double mean = stats[stats_index(s, g, ch)];
    double sdy = 0, sdyx = 0;
#pragma unroll 4
    for (unsigned j = threadIdx.x; j < r.len; j += blockDim.x) {
      const std::size_t i = r.at<V>(j);
      const Pack<T, V> d = load<T, V>(dy + i), v = load<T, V>(x + i);
      Pack<T, V> dr;
      for (int e = 0; e < V; ++e) {
        const float m = masked(relu.y, d.v[e], i + e);
        dr.v[e] = from_float<T>(m);
        const double de = m;
        sdy += de;
        sdyx += de * (to_float(v.v[e]) - mean);
      }
      // Each value is in one split: this thread alone reads and writes it (dresidual may alias dy).
      if (relu.dresidual) store<T, V>(relu.dresidual + i, dr);
    }
    const Sums t = block_sums(sdy, sdyx);
    p.a = t.a;
    p.b = t.b;
  } else {
    double sum = 0;
#pragma unroll 4
    for (unsigned j = threadIdx.x; j < r.len; j += blockDim.x) {
      const Pack<T, V> v = load<T, V>(x + r.at<V>(j));
      for (int e = 0; e < V; ++e) sum += to_float(v.v[e]);
    }
    const double total = block_sum(sum), mean = count > 0 ? total / count : 0.0;
    double dev = 0;
#pragma unroll 4
    for (unsigned j = threadIdx.x; j < r.len; j += blockDim.x) {
      const Pack<T, V> v = load<T, V>(x + r.at<V>(j));
      for (int e = 0; e < V; ++e) {
        const double d = to_float(v.v[e]) - mean;
        dev += d * d;
      }
    }
    p.a = mean;
    p.b = block_sum(dev);
  }
  if (threadIdx.x == 0) partials[(static_cast<std::size_t>(g) * s.c + ch) * splits + k] = p;
}

// Sums v over the block's warps, lane by lane in warp order; every thread gets its lane's total. Every
// thread of the block must call it; successive calls need no barrier between them (as block_sums).
__device__ double tile_sum(double v) {
  __shared__ double partial[kTileRows][kWarp];
  __shared__ double total[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  partial[warp][lane] = v;
  __syncthreads();
  if (warp == 0) {
    double t = 0;
    for (int w = 0; w < kTileRows; ++w) t += partial[w][lane];
    total[lane] = t;
  }
  __syncthreads();
  return total[lane];
}

// Block (tile * splits + k, g) of an NHWC tensor: the Partial of each channel of its tile over split k of
// the group's positions, as batch_norm_partial_kernel computes it for one channel.
template <class T>
__global__ void __launch_bounds__(kSplitBlock)
    batch_norm_partial_nhwc_kernel(Partial* partials, const T* x, const T* dy, const float* stats,
                                   cpu::BatchNormShape s, int splits, NormReluGrad<T> relu) {
  const int tile = blockIdx.x / splits, k = blockIdx.x - tile * splits, g = blockIdx.y;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, ch = tile * kWarp + lane;
  const bool live = ch < s.c;
  const Span span = split_span(static_cast<std::size_t>(min(s.group, s.n - g * s.group)) * s.hw,
                               static_cast<std::size_t>(s.group) * s.hw, k, splits);
  // Offset of this lane's channel at the split's first position.
  const std::size_t first = (static_cast<std::size_t>(g) * s.group * s.hw + span.u0) * s.c + ch;
  const unsigned len = live ? span.len : 0u;
  const double count = span.len;
  Partial p{count, 0, 0};
  if (dy) {
    const double mean = live ? stats[stats_index(s, g, ch)] : 0.0;
    double sdy = 0, sdyx = 0;
#pragma unroll 4
    for (unsigned r = warp; r < len; r += kTileRows) {
      const std::size_t i = first + static_cast<std::size_t>(r) * s.c;
      const float m = masked(relu.y, dy[i], i);
      if (relu.dresidual) relu.dresidual[i] = from_float<T>(m);
      const double d = m;
      sdy += d;
      sdyx += d * (to_float(x[i]) - mean);
    }
    p.a = tile_sum(sdy);
    p.b = tile_sum(sdyx);
  } else {
    double sum = 0;
#pragma unroll 4
    for (unsigned r = warp; r < len; r += kTileRows) sum += to_float(x[first + static_cast<std::size_t>(r) * s.c]);
    const double total = tile_sum(sum), mean = count > 0 ? total / count : 0.0;
    double dev = 0;
#pragma unroll 4
    for (unsigned r = warp; r < len; r += kTileRows) {
      const double d = to_float(x[first + static_cast<std::size_t>(r) * s.c]) - mean;
      dev += d * d;
    }
    p.a = mean;
    p.b = tile_sum(dev);
  }
  if (live && warp == 0) partials[(static_cast<std::size_t>(g) * s.c + ch) * splits + k] = p;
}

// One thread per channel: its groups' statistics from their partials, in split order, and the running
// statistics or moments from the groups, in group order (the CPU's order).
__global__ void batch_norm_stats_kernel(float* stats, const Partial* partials, cpu::BatchNormShape s, int groups,
                                        int splits, double eps, double* moments, float* running_mean,
                                        float* running_var, int64_t* tracked, double momentum) {
  const std::size_t i = global_index();
  // Counted once per call, as on the CPU, whatever the number of channels.
  if (running_mean && i == 0) *tracked += groups;
  if (i >= static_cast<std::size_t>(s.c)) return;
  const int c = static_cast<int>(i);
  for (int g = 0; g < groups; ++g) {
    double count = 0, mean = 0, m2 = 0;
    const Partial* p = partials + (static_cast<std::size_t>(g) * s.c + c) * splits;
    for (int k = 0; k < splits; ++k) chan_merge(count, mean, m2, p[k].count, p[k].a, p[k].b);
    const std::size_t at = stats_index(s, g, c);
    stats[at] = static_cast<float>(mean);
    stats[at + s.c] = static_cast<float>(inv_std(m2 / count, eps));
    if (moments) {
      chan_merge(moments[c], moments[s.c + c], moments[2 * static_cast<std::size_t>(s.c) + c], count, mean, m2);
    }
    if (running_mean) {
      running_mean[c] = static_cast<float>((1 - momentum) * running_mean[c] + momentum * mean);
      running_var[c] =
          static_cast<float>((1 - momentum) * running_var[c] + momentum * (count > 1 ? m2 / (count - 1) : 0.0));
    }
  }
}

// One thread per channel: dw, db from the groups' partials, and each group's input-gradient map (coeffs
// may be null: no dx). dx = w invstd (dy - mean(dy) - xhat mean(dy xhat)) with batch statistics, w invstd
// dy without.
__global__ void batch_norm_grad_kernel(float* dw, float* db, Coeff* coeffs, const Partial* partials, const float* w,
                                       const float* stats, cpu::BatchNormShape s, int groups, int splits,
                                       bool batch_stats, bool accumulate) {
  const std::size_t i = global_index();
  if (i >= static_cast<std::size_t>(s.c)) return;
  const int c = static_cast<int>(i);
  double sum_dw = 0, sum_db = 0;
  for (int g = 0; g < groups; ++g) {
    double count = 0, sdy = 0, sdyx = 0;
    const Partial* p = partials + (static_cast<std::size_t>(g) * s.c + c) * splits;
    for (int k = 0; k < splits; ++k) {
      count += p[k].count;
      sdy += p[k].a;
      sdyx += p[k].b;
    }
    const std::size_t at = stats_index(s, g, c);
    const double invstd = stats[at + s.c];
    sum_db += sdy;
    sum_dw += sdyx * invstd;
    if (!coeffs) continue;
    const double kd = w[c] * invstd;
    coeffs[static_cast<std::size_t>(g) * s.c + c] = {
        static_cast<float>(kd), static_cast<float>(batch_stats ? kd * sdy / count : 0.0),
        static_cast<float>(batch_stats ? kd * sdyx * invstd * invstd / count : 0.0), stats[at]};
  }
  put(dw[c], static_cast<float>(sum_dw), accumulate);
  put(db[c], static_cast<float>(sum_db), accumulate);
}

__global__ void batch_norm_commit_kernel(float* running_mean, float* running_var, int64_t* tracked,
                                         const double* moments, int c, double momentum) {
  const std::size_t i = global_index();
  if (i == 0) *tracked += 1;
  if (i >= static_cast<std::size_t>(c)) return;
  const double count = moments[i], mean = moments[c + i], m2 = moments[2 * static_cast<std::size_t>(c) + i];
  running_mean[i] = static_cast<float>((1 - momentum) * running_mean[i] + momentum * mean);
  running_var[i] =
      static_cast<float>((1 - momentum) * running_var[i] + momentum * (count > 1 ? m2 / (count - 1) : 0.0));
}

// Frozen statistics for the backward: every group gets the running ones.
__global__ void batch_norm_frozen_stats_kernel(float* stats, const float* running_mean, const float* running_var,
                                               cpu::BatchNormShape s, int groups, double eps) {
  const std::size_t i = global_index();
  if (i >= static_cast<std::size_t>(s.c)) return;
  const int c = static_cast<int>(i);
  const float invstd = static_cast<float>(inv_std(running_var[c], eps));
  for (int g = 0; g < groups; ++g) {
    const std::size_t at = stats_index(s, g, c);
    stats[at] = running_mean[c];
    stats[at + s.c] = invstd;
  }
}

// y from x and a (group, channel)'s affine map: from stored statistics (training, recomputation) or from
// the running ones (running_var != null: frozen). The training forward and batch_norm_apply run this one
// code, so their outputs have the same bits.
template <class T> struct AffineOp {
  T* y;
  const T* x;
  const float *w, *b, *stats, *running_mean, *running_var;
  double eps;
  int c;
  NormEpilogue<T> epi;
  __device__ ScaleShift at(int g, int ch) const {
    if (running_var) return scale_shift(w[ch], b[ch], running_mean[ch], static_cast<float>(inv_std(running_var[ch], eps)));
    const std::size_t k = static_cast<std::size_t>(2 * g) * c + ch;
    return scale_shift(w[ch], b[ch], stats[k], stats[k + c]);
  }
  template <int V> __device__ void operator()(std::size_t i, int g, int ch, int step) const {
    const Pack<T, V> in = load<T, V>(x + i);
    Pack<T, V> out;
    ScaleShift a = at(g, ch);
    for (int e = 0; e < V; ++e) {
      if (step && e) a = at(g, ch + e);
      out.v[e] = epilogue<T>(affine(to_float(in.v[e]), a), epi.residual, epi.relu, i + e);
    }
    store<T, V>(y + i, out);
  }
};

template <class T> struct InputGradOp {
  T* dx;
  const T *dy, *x;
  const Coeff* coeffs;
  cpu::BatchNormShape s;
  NormReluGrad<T> relu;  // the fused ReLU's mask (none: no ReLU)
  template <int V> __device__ void operator()(std::size_t i, int g, int ch, int step) const {
    const Pack<T, V> d = load<T, V>(dy + i), v = load<T, V>(x + i);
    Pack<T, V> out;
    const Coeff* row = coeffs + static_cast<std::size_t>(g) * s.c;
    Coeff k = row[ch];
    for (int e = 0; e < V; ++e) {
      if (step && e) k = row[ch + e];
      out.v[e] = from_float<T>(k.k * masked(relu.y, d.v[e], i + e) - k.a - k.slope * (to_float(v.v[e]) - k.mean));
    }
    store<T, V>(dx + i, out);
  }
};

// Every value of a BatchNorm tensor once, V at a time: V consecutive values share a feature map (NCHW) or
// a position (NHWC, V consecutive channels: step 1). op(i, group, channel, step) handles those at i.
template <int V, class Op>
__global__ void __launch_bounds__(kBlock) batch_norm_map_kernel(Op op, cpu::BatchNormShape s, std::size_t units) {
  const bool nhwc = s.layout == Layout::NHWC;
  const unsigned per_run = nhwc ? static_cast<unsigned>(s.c / V) : static_cast<unsigned>(s.hw / V);
  for (std::size_t u = global_index(); u < units; u += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t run = quotient(u, per_run);  // a feature map (n, c) or a position (n, p)
    const unsigned within = static_cast<unsigned>(u - run * per_run);
    const std::size_t n = quotient(run, nhwc ? static_cast<unsigned>(s.hw) : static_cast<unsigned>(s.c));
    const int ch = nhwc ? static_cast<int>(within) * V : static_cast<int>(run - n * s.c);
    op.template operator()<V>(u * V, static_cast<int>(n) / s.group, ch, nhwc ? 1 : 0);
  }
}

// Whether the values of every pointer can be accessed 4 at a time: a feature map (NCHW) or a position's
// channels (NHWC) is a multiple of 4 values, and each pointer is aligned for it (arena offsets may not be).
template <class T> bool packs_of_4(const cpu::BatchNormShape& s, std::initializer_list<const void*> ptrs) {
  if ((s.layout == Layout::NHWC ? s.c : s.hw) % 4 != 0) return false;
  for (const void* p : ptrs)
    if (!aligned(p, 4 * sizeof(T))) return false;
  return true;
}

template <class T, class Op>
void bn_map(const Op& op, const cpu::BatchNormShape& s, bool packed, cudaStream_t stream) {
  const std::size_t count = static_cast<std::size_t>(s.n) * s.c * s.hw;
  if (count == 0) return;
  const std::size_t units = packed ? count / 4 : count;
  const unsigned blocks = static_cast<unsigned>(std::min((units + kBlock - 1) / kBlock, kMaxMapBlocks));
  if (packed) {
    batch_norm_map_kernel<4><<<blocks, kBlock, 0, stream>>>(op, s, units);
  } else {
    batch_norm_map_kernel<1><<<blocks, kBlock, 0, stream>>>(op, s, units);
  }
  CRUMB_CUDA_CHECK_LAUNCH();
}

// The partials of every (group, channel, split); dy null: the forward's.
template <class T>
void launch_partials(Partial* partials, const T* x, const T* dy, const float* stats,
                     const cpu::BatchNormShape& s, int groups, int splits, cudaStream_t stream,
                     const NormReluGrad<T>& relu = {}) {
  const bool nhwc = s.layout == Layout::NHWC;
  const std::size_t columns = nhwc ? (static_cast<std::size_t>(s.c) + kWarp - 1) / kWarp : s.c;
  CRUMB_CHECK(columns * splits <= static_cast<std::size_t>(INT_MAX) && groups <= 65535, "BatchNorm: ", s.c,
              " channels in ", groups, " groups exceed the grid limit");
  // The kernels count a split's values, and their offset within a feature map, in 32 bits.
  const std::size_t per_split = (static_cast<std::size_t>(s.group) * s.hw + splits - 1) / splits;
  CRUMB_CHECK(per_split + s.hw <= UINT_MAX, "BatchNorm: groups of ", s.group, " samples of ", s.hw,
              " values per channel exceed the kernels' 32-bit ranges");
  const dim3 grid(static_cast<unsigned>(columns * splits), static_cast<unsigned>(groups));
  if (nhwc) {
    batch_norm_partial_nhwc_kernel<T><<<grid, kSplitBlock, 0, stream>>>(partials, x, dy, stats, s, splits, relu);
  } else if (packs_of_4<T>(s, {x, dy, relu.dresidual})) {  // a feature map's packs are aligned where x's are
    batch_norm_partial_kernel<T, 4><<<grid, kSplitBlock, 0, stream>>>(partials, x, dy, stats, s, splits, relu);
  } else {
    batch_norm_partial_kernel<T, 1><<<grid, kSplitBlock, 0, stream>>>(partials, x, dy, stats, s, splits, relu);
  }
  CRUMB_CUDA_CHECK_LAUNCH();
}

void check_workspace(std::size_t bytes, std::size_t needed, const char* what, const cpu::BatchNormShape& s) {
  CRUMB_CHECK(bytes >= needed, what, ": workspace of ", bytes, " bytes, n=", s.n, " c=", s.c, " hw=", s.hw,
              " group=", s.group, " needs ", needed, " (", what, "_workspace)");
}

// GroupNorm row = sample * groups + group: its c / groups channels are one contiguous block of len
// values at row * len.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    group_norm_forward_kernel(T* y, float* stats, const T* x, const float* w, const float* b,
                              cpu::GroupNormShape s, double eps, NormEpilogue<T> epi) {
  const std::size_t row = blockIdx.x, sample = row / s.groups, g = row % s.groups;
  const int cpg = s.c / s.groups;
  const std::size_t len = static_cast<std::size_t>(cpg) * s.hw, at = row * len;
  const T* xr = x + at;
  double sum = 0;
  for (std::size_t e = threadIdx.x; e < len; e += blockDim.x) sum += to_float(xr[e]);
  const double mean = block_sum(sum) / static_cast<double>(len);
  double dev = 0;
  for (std::size_t e = threadIdx.x; e < len; e += blockDim.x) {
    const double d = to_float(xr[e]) - mean;
    dev += d * d;
  }
  // The affine map from the statistics as stored, as the backward reads them.
  const float mean_f = static_cast<float>(mean);
  const float invstd_f = static_cast<float>(inv_std(block_sum(dev) / static_cast<double>(len), eps));
  if (threadIdx.x == 0) {
    stats[sample * 2 * s.groups + g] = mean_f;
    stats[sample * 2 * s.groups + s.groups + g] = invstd_f;
  }
  T* yr = y + at;
  for (std::size_t e = threadIdx.x; e < len; e += blockDim.x) {
    const std::size_t c = g * cpg + e / s.hw;
    yr[e] = epilogue<T>(affine(to_float(xr[e]), scale_shift(w[c], b[c], mean_f, invstd_f)),
                        epi.residual ? epi.residual + at : nullptr, epi.relu, e);
  }
}

// Within a group w varies by channel: dx = invstd (dy w - mean(dy w) - xhat mean(dy w xhat)).
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    group_norm_backward_data_kernel(T* dx, const T* dy, const T* x, const float* w, const float* stats,
                                    cpu::GroupNormShape s, NormReluGrad<T> relu) {
  const std::size_t row = blockIdx.x, sample = row / s.groups, g = row % s.groups;
  const int cpg = s.c / s.groups;
  const std::size_t len = static_cast<std::size_t>(cpg) * s.hw, at = row * len;
  const double mean = stats[sample * 2 * s.groups + g], invstd = stats[sample * 2 * s.groups + s.groups + g];
  const T* dyr = dy + at;
  const T* xr = x + at;
  const T* yr = relu.y ? relu.y + at : nullptr;
  // The gradient reaching the normalisation at e of the row.
  auto gate = [&](std::size_t e) { return masked(yr, dyr[e], e); };
  double sdyw = 0, sdywx = 0;  // sum of dy w and of dy w (x - mean) over the row
  for (std::size_t e = threadIdx.x; e < len; e += blockDim.x) {
    const double dyw = static_cast<double>(gate(e)) * w[g * cpg + e / s.hw];
    sdyw += dyw;
    sdywx += dyw * (to_float(xr[e]) - mean);
  }
  const Sums t = block_sums(sdyw, sdywx);
  const double n_r = static_cast<double>(len);
  const float a = static_cast<float>(invstd * t.a / n_r);
  const float slope = static_cast<float>(invstd * invstd * invstd * t.b / n_r);
  const float mean_f = static_cast<float>(mean);
  T* dxr = dx + at;
  for (std::size_t e = threadIdx.x; e < len; e += blockDim.x) {
    const float k = static_cast<float>(w[g * cpg + e / s.hw] * invstd);
    dxr[e] = from_float<T>(k * gate(e) - a - slope * (to_float(xr[e]) - mean_f));
  }
}

// dw, db reduce over samples: one block per channel, so no two blocks write one channel.
template <class T>
__global__ void __launch_bounds__(kChannelBlock)
    group_norm_backward_weight_kernel(float* dw, float* db, const T* dy, const T* x, const float* stats,
                                      cpu::GroupNormShape s, bool accumulate, NormReluGrad<T> relu) {
  const int c = blockIdx.x;
  const std::size_t g = c / (s.c / s.groups);
  const ChannelRuns runs{static_cast<std::size_t>(s.hw), static_cast<std::size_t>(s.c) * s.hw};
  const std::size_t count = static_cast<std::size_t>(s.n) * s.hw, first = static_cast<std::size_t>(c) * s.hw;
  double sum_db = 0, sum_dw = 0;
  for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
    const std::size_t sample = e / s.hw, i = first + runs.at(e);
    const double mean = stats[sample * 2 * s.groups + g], invstd = stats[sample * 2 * s.groups + s.groups + g];
    const float m = masked(relu.y, dy[i], i);
    // The data kernel has run (same stream): this block alone writes these values (dresidual may alias dy).
    if (relu.dresidual) relu.dresidual[i] = from_float<T>(m);
    const double d = m;
    sum_db += d;
    sum_dw += d * (to_float(x[i]) - mean) * invstd;
  }
  const Sums t = block_sums(sum_dw, sum_db);
  if (threadIdx.x == 0) {
    put(dw[c], static_cast<float>(t.a), accumulate);
    put(db[c], static_cast<float>(t.b), accumulate);
  }
}

// The groups of a BatchNorm shape after checking it; none for an empty batch, whose group may be 0 (the
// op's "whole micro-batch" of no samples).
int bn_groups(const cpu::BatchNormShape& s, const char* what) {
  nchw_count(s.n, s.c, s.hw, what);
  if (s.n == 0) return 0;
  CRUMB_CHECK(s.group >= 1, what, ": bad group of ", s.group, " samples");
  return s.groups();
}

// The rows (sample, group) of a GroupNorm shape after checking it.
unsigned gn_rows(const cpu::GroupNormShape& s, const char* what) {
  nchw_count(s.n, s.c, s.hw, what);
  CRUMB_CHECK(s.groups >= 1 && s.c % s.groups == 0, what, ": ", s.groups, " groups do not divide ", s.c, " channels");
  const std::size_t rows = static_cast<std::size_t>(s.n) * s.groups;
  CRUMB_CHECK(rows <= static_cast<std::size_t>(INT_MAX), what, ": ", rows, " rows exceed the grid limit");
  return static_cast<unsigned>(rows);
}

}  // namespace

std::size_t batch_norm_forward_train_workspace(const cpu::BatchNormShape& s) {
  return bn_partials(s) * sizeof(Partial);
}

std::size_t batch_norm_backward_workspace(const cpu::BatchNormShape& s) {
  const std::size_t coeffs = s.n == 0 ? 0 : static_cast<std::size_t>(s.groups()) * s.c;
  return bn_partials(s) * sizeof(Partial) + coeffs * sizeof(Coeff);
}

template <class T>
void batch_norm_forward_train(T* y, float* stats, const T* x, const float* w, const float* b,
                              const cpu::BatchNormShape& s, double eps, double* moments, float* running_mean,
                              float* running_var, int64_t* tracked, double momentum, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream, const NormEpilogue<T>& epilogue) {
  const int groups = bn_groups(s, "batch_norm_forward_train");
  CRUMB_CHECK((running_mean == nullptr) == (running_var == nullptr) && (!running_mean || tracked),
              "batch_norm_forward_train: running_mean, running_var and tracked go together");
  if (groups == 0) return;  // nothing to normalise, and no group to count
  check_workspace(workspace_bytes, batch_norm_forward_train_workspace(s), "batch_norm_forward_train", s);
  const int splits = bn_splits(s);
  Partial* partials = static_cast<Partial*>(workspace);
  if (s.c > 0) launch_partials<T>(partials, x, nullptr, nullptr, s, groups, splits, stream);
  // At least one thread, which counts the groups even without channels.
  batch_norm_stats_kernel<<<blocks_for(std::max(s.c, 1)), kBlock, 0, stream>>>(
      stats, partials, s, groups, splits, eps, moments, running_mean, running_var, tracked, momentum);
  CRUMB_CUDA_CHECK_LAUNCH();
  bn_map<T>(AffineOp<T>{y, x, w, b, stats, nullptr, nullptr, eps, s.c, epilogue}, s, packs_of_4<T>(s, {y, x}), stream);
}

void batch_norm_commit(float* running_mean, float* running_var, int64_t* tracked, const double* moments, int c,
                       double momentum, cudaStream_t stream) {
  CRUMB_CHECK(c >= 0, "batch_norm_commit: bad channel count ", c);
  // At least one thread, which counts the commit even without channels.
  const std::size_t threads = c > 0 ? static_cast<std::size_t>(c) : 1;
  batch_norm_commit_kernel<<<blocks_for(threads), kBlock, 0, stream>>>(running_mean, running_var, tracked, moments, c,
                                                                       momentum);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void batch_norm_apply(T* y, const T* x, const float* w, const float* b, const float* stats,
                      const cpu::BatchNormShape& s, cudaStream_t stream, const NormEpilogue<T>& epilogue) {
  bn_groups(s, "batch_norm_apply");
  bn_map<T>(AffineOp<T>{y, x, w, b, stats, nullptr, nullptr, 0.0, s.c, epilogue}, s, packs_of_4<T>(s, {y, x}), stream);
}

template <class T>
void batch_norm_forward_frozen(T* y, float* stats, const T* x, const float* w, const float* b,
                               const float* running_mean, const float* running_var, const cpu::BatchNormShape& s,
                               double eps, cudaStream_t stream, const NormEpilogue<T>& epilogue) {
  const int groups = bn_groups(s, "batch_norm_forward_frozen");
  if (groups == 0 || s.c == 0) return;
  if (stats) {
    batch_norm_frozen_stats_kernel<<<blocks_for(s.c), kBlock, 0, stream>>>(stats, running_mean, running_var, s, groups,
                                                                           eps);
    CRUMB_CUDA_CHECK_LAUNCH();
  }
  bn_map<T>(AffineOp<T>{y, x, w, b, nullptr, running_mean, running_var, eps, s.c, epilogue}, s,
            packs_of_4<T>(s, {y, x}), stream);
}

template <class T>
void batch_norm_backward(float* dw, float* db, T* dx, const T* dy, const T* x, const float* w,
                         const float* stats, const cpu::BatchNormShape& s, bool batch_stats, bool accumulate,
                         void* workspace, std::size_t workspace_bytes, cudaStream_t stream,
                         const NormReluGrad<T>& relu) {
  const int groups = bn_groups(s, "batch_norm_backward");
  if (s.c == 0) return;
  check_workspace(workspace_bytes, batch_norm_backward_workspace(s), "batch_norm_backward", s);
  const int splits = groups > 0 ? bn_splits(s) : 0;
  Partial* partials = static_cast<Partial*>(workspace);
  Coeff* coeffs = dx && groups > 0 ? reinterpret_cast<Coeff*>(partials + bn_partials(s)) : nullptr;
  if (groups > 0) launch_partials<T>(partials, x, dy, stats, s, groups, splits, stream, relu);
  // n == 0 still launches: the gradient of an empty batch is zero, which write mode must store.
  batch_norm_grad_kernel<<<blocks_for(s.c), kBlock, 0, stream>>>(dw, db, coeffs, partials, w, stats, s, groups, splits,
                                                                 batch_stats, accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
  if (coeffs) bn_map<T>(InputGradOp<T>{dx, dy, x, coeffs, s, relu}, s, packs_of_4<T>(s, {dx, dy, x}), stream);
}

template <class T>
void group_norm_forward(T* y, float* stats, const T* x, const float* w, const float* b,
                        const cpu::GroupNormShape& s, double eps, cudaStream_t stream,
                        const NormEpilogue<T>& epilogue) {
  const unsigned rows = gn_rows(s, "group_norm_forward");
  if (rows == 0 || s.c == 0) return;
  group_norm_forward_kernel<<<rows, kRowBlock, 0, stream>>>(y, stats, x, w, b, s, eps, epilogue);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void group_norm_backward(float* dw, float* db, T* dx, const T* dy, const T* x, const float* w,
                         const float* stats, const cpu::GroupNormShape& s, bool accumulate, cudaStream_t stream,
                         const NormReluGrad<T>& relu) {
  const unsigned rows = gn_rows(s, "group_norm_backward");
  if (s.c == 0) return;
  if (dx && rows > 0) {
    group_norm_backward_data_kernel<<<rows, kRowBlock, 0, stream>>>(dx, dy, x, w, stats, s, relu);
    CRUMB_CUDA_CHECK_LAUNCH();
  }
  // n == 0 still launches, as above.
  group_norm_backward_weight_kernel<<<s.c, kChannelBlock, 0, stream>>>(dw, db, dy, x, stats, s, accumulate, relu);
  CRUMB_CUDA_CHECK_LAUNCH();
}

#define CRUMB_INSTANTIATE(T)                                                                                    \
  template void batch_norm_forward_train<T>(T*, float*, const T*, const float*, const float*,                       \
                                            const cpu::BatchNormShape&, double, double*, float*, float*, int64_t*, \
                                            double, void*, std::size_t, cudaStream_t, const NormEpilogue<T>&);     \
  template void batch_norm_apply<T>(T*, const T*, const float*, const float*, const float*,                        \
                                    const cpu::BatchNormShape&, cudaStream_t, const NormEpilogue<T>&);             \
  template void batch_norm_forward_frozen<T>(T*, float*, const T*, const float*, const float*, const float*,        \
                                             const float*, const cpu::BatchNormShape&, double, cudaStream_t,       \
                                             const NormEpilogue<T>&);                                              \
  template void batch_norm_backward<T>(float*, float*, T*, const T*, const T*, const float*, const float*,         \
                                       const cpu::BatchNormShape&, bool, bool, void*, std::size_t, cudaStream_t,   \
                                       const NormReluGrad<T>&);                                                    \
  template void group_norm_forward<T>(T*, float*, const T*, const float*, const float*, const cpu::GroupNormShape&, \
                                      double, cudaStream_t, const NormEpilogue<T>&);                               \
  template void group_norm_backward<T>(float*, float*, T*, const T*, const T*, const float*, const float*,         \
                                       const cpu::GroupNormShape&, bool, cudaStream_t, const NormReluGrad<T>&);
CRUMB_CUDA_FOR_FLOAT_TYPES(CRUMB_INSTANTIATE)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cuda
