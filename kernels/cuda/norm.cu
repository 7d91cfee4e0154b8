// BatchNorm and GroupNorm on NCHW tensors of float or 16-bit values (loaded as float): the twins of
// kernels/cpu/norm.cc. Statistics are accumulated in double in two passes (the mean, then the squared
// deviations from it), as on the CPU; parameters, their gradients, stats and running statistics are
// float32 (moments double) whatever the activations' storage type.
// Every reduction is one block's fixed-order sum, without atomics, so results are deterministic:
// - BatchNorm: one block per channel, visiting the channel's groups in order, so that its moments and
//   running statistics are merged in the CPU's order, by one thread;
// - GroupNorm: one block per (sample, group) row for the forward and the input gradient (a row is
//   contiguous), and one block per channel for the weight and bias gradients (a sum over samples).
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>

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

// Samples in BatchNorm group g (the last group may be shorter).
__device__ int group_size(const cpu::BatchNormShape& s, int g) { return min(s.group, s.n - g * s.group); }

// Where a BatchNorm channel's values are: runs of hw values c * hw apart (NCHW), or single values c
// apart (NHWC: each thread of a channel's block reads with a stride of c elements).
__device__ ChannelRuns runs_of(const cpu::BatchNormShape& s) {
  if (s.layout == Layout::NHWC) return {1, static_cast<std::size_t>(s.c)};
  return {static_cast<std::size_t>(s.hw), static_cast<std::size_t>(s.c) * s.hw};
}

// Offset of channel c's first value.
__device__ std::size_t channel_offset(const cpu::BatchNormShape& s, int c) {
  return s.layout == Layout::NHWC ? static_cast<std::size_t>(c) : static_cast<std::size_t>(c) * s.hw;
}

// Offset of BatchNorm group g's values of channel c: its first sample's values of c.
__device__ std::size_t group_offset(const cpu::BatchNormShape& s, int g, int c) {
  return static_cast<std::size_t>(g) * s.group * s.c * s.hw + channel_offset(s, c);
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
__device__ ScaleShift scale_shift(float w, float b, float mean, float invstd) {
  const double scale = w * static_cast<double>(invstd);
  return {static_cast<float>(scale), static_cast<float>(b - mean * scale)};
}

template <class T>
__global__ void __launch_bounds__(kChannelBlock)
    batch_norm_forward_train_kernel(T* y, float* stats, const T* x, const float* w, const float* b,
                                    cpu::BatchNormShape s, int groups, double eps, double* moments,
                                    float* running_mean, float* running_var, int64_t* tracked, double momentum) {
  // Counted once per call, as on the CPU, whatever the number of channels.
  if (running_mean && blockIdx.x == 0 && threadIdx.x == 0) *tracked += groups;
  const int c = blockIdx.x;
  if (c >= s.c) return;  // the one block of a launch without channels, there only to count
  const ChannelRuns runs = runs_of(s);
  for (int g = 0; g < groups; ++g) {
    const std::size_t count = static_cast<std::size_t>(group_size(s, g)) * s.hw, at = group_offset(s, g, c);
    const T* xg = x + at;
    double sum = 0;
    for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) sum += to_float(xg[runs.at(e)]);
    const double mean = block_sum(sum) / static_cast<double>(count);
    double dev = 0;
    for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
      const double d = to_float(xg[runs.at(e)]) - mean;
      dev += d * d;
    }
    const double m2 = block_sum(dev);
    const float mean_f = static_cast<float>(mean), invstd_f = static_cast<float>(inv_std(m2 / static_cast<double>(count), eps));
    const ScaleShift a = scale_shift(w[c], b[c], mean_f, invstd_f);
    T* yg = y + at;
    for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
      const std::size_t i = runs.at(e);
      yg[i] = from_float<T>(to_float(xg[i]) * a.scale + a.shift);
    }
    if (threadIdx.x == 0) {  // the others go on to the next group's reductions and wait there
      const std::size_t k = stats_index(s, g, c);
      stats[k] = mean_f;
      stats[k + s.c] = invstd_f;
      if (moments) {  // Chan et al.: merge the group's (count, mean, m2) into the channel's running total
        double& n_a = moments[c];
        double& mean_a = moments[s.c + c];
        double& m2_a = moments[2 * static_cast<std::size_t>(s.c) + c];
        const double n_b = static_cast<double>(count), total = n_a + n_b, delta = mean - mean_a;
        mean_a += delta * (n_b / total);
        m2_a += m2 + delta * delta * (n_a * n_b / total);
        n_a = total;
      }
      if (running_mean) {
        const double n_b = static_cast<double>(count);
        running_mean[c] = static_cast<float>((1 - momentum) * running_mean[c] + momentum * mean);
        running_var[c] =
            static_cast<float>((1 - momentum) * running_var[c] + momentum * (n_b > 1 ? m2 / (n_b - 1) : 0.0));
      }
    }
  }
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

template <class T>
__global__ void __launch_bounds__(kChannelBlock)
    batch_norm_forward_frozen_kernel(T* y, float* stats, const T* x, const float* w, const float* b,
                                     const float* running_mean, const float* running_var, cpu::BatchNormShape s,
                                     int groups, double eps) {
  const int c = blockIdx.x;
  const float invstd = static_cast<float>(inv_std(running_var[c], eps));
  const ScaleShift a = scale_shift(w[c], b[c], running_mean[c], invstd);
  const ChannelRuns runs = runs_of(s);
  const std::size_t count = static_cast<std::size_t>(s.n) * s.hw, first = channel_offset(s, c);
  for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
    const std::size_t i = first + runs.at(e);
    y[i] = from_float<T>(to_float(x[i]) * a.scale + a.shift);
  }
  if (!stats) return;
  for (int g = static_cast<int>(threadIdx.x); g < groups; g += static_cast<int>(blockDim.x)) {
    const std::size_t k = stats_index(s, g, c);
    stats[k] = running_mean[c];
    stats[k + s.c] = invstd;
  }
}

// One block per channel, groups in turn: y from x and each group's stored statistics.
template <class T>
__global__ void __launch_bounds__(kChannelBlock)
    batch_norm_apply_kernel(T* y, const T* x, const float* w, const float* b, const float* stats,
                            cpu::BatchNormShape s, int groups) {
  const int c = blockIdx.x;
  const ChannelRuns runs = runs_of(s);
  for (int g = 0; g < groups; ++g) {
    const std::size_t count = static_cast<std::size_t>(group_size(s, g)) * s.hw, at = group_offset(s, g, c),
                      k = stats_index(s, g, c);
    const ScaleShift a = scale_shift(w[c], b[c], stats[k], stats[k + s.c]);
    for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
      const std::size_t i = at + runs.at(e);
      y[i] = from_float<T>(to_float(x[i]) * a.scale + a.shift);
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kChannelBlock)
    batch_norm_backward_kernel(float* dw, float* db, T* dx, const T* dy, const T* x, const float* w,
                               const float* stats, cpu::BatchNormShape s, int groups, bool batch_stats,
                               bool accumulate) {
  const int c = blockIdx.x;
  const ChannelRuns runs = runs_of(s);
  double sum_dw = 0, sum_db = 0;  // the same in every thread: sums of block totals
  for (int g = 0; g < groups; ++g) {
    const std::size_t count = static_cast<std::size_t>(group_size(s, g)) * s.hw, at = group_offset(s, g, c);
    const std::size_t k = stats_index(s, g, c);
    const double mean = stats[k], invstd = stats[k + s.c];
    const T* dyg = dy + at;
    const T* xg = x + at;
    double sdy = 0, sdyx = 0;  // sum of dy and of dy * (x - mean) over the group
    for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
      const std::size_t i = runs.at(e);
      const double d = to_float(dyg[i]);
      sdy += d;
      sdyx += d * (to_float(xg[i]) - mean);
    }
    const Sums t = block_sums(sdy, sdyx);
    sum_db += t.a;
    sum_dw += t.b * invstd;
    if (!dx) continue;
    // dx = w invstd (dy - mean(dy) - xhat mean(dy xhat)) with batch statistics, w invstd dy without.
    const double n_g = static_cast<double>(count), kd = w[c] * invstd;
    const float a = static_cast<float>(batch_stats ? kd * t.a / n_g : 0.0);
    const float slope = static_cast<float>(batch_stats ? kd * t.b * invstd * invstd / n_g : 0.0);
    const float k_f = static_cast<float>(kd), mean_f = static_cast<float>(mean);
    T* dxg = dx + at;
    for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
      const std::size_t i = runs.at(e);
      dxg[i] = from_float<T>(k_f * to_float(dyg[i]) - a - slope * (to_float(xg[i]) - mean_f));
    }
  }
  if (threadIdx.x == 0) {
    put(dw[c], static_cast<float>(sum_dw), accumulate);
    put(db[c], static_cast<float>(sum_db), accumulate);
  }
}

// GroupNorm row = sample * groups + group: its c / groups channels are one contiguous block of len
// values at row * len.
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    group_norm_forward_kernel(T* y, float* stats, const T* x, const float* w, const float* b,
                              cpu::GroupNormShape s, double eps) {
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
  const double invstd = inv_std(block_sum(dev) / static_cast<double>(len), eps);
  if (threadIdx.x == 0) {
    stats[sample * 2 * s.groups + g] = static_cast<float>(mean);
    stats[sample * 2 * s.groups + s.groups + g] = static_cast<float>(invstd);
  }
  T* yr = y + at;
  for (std::size_t e = threadIdx.x; e < len; e += blockDim.x) {
    const std::size_t c = g * cpg + e / s.hw;
    const double scale = w[c] * invstd;
    yr[e] = from_float<T>(to_float(xr[e]) * static_cast<float>(scale) + static_cast<float>(b[c] - mean * scale));
  }
}

// Within a group w varies by channel: dx = invstd (dy w - mean(dy w) - xhat mean(dy w xhat)).
template <class T>
__global__ void __launch_bounds__(kRowBlock)
    group_norm_backward_data_kernel(T* dx, const T* dy, const T* x, const float* w, const float* stats,
                                    cpu::GroupNormShape s) {
  const std::size_t row = blockIdx.x, sample = row / s.groups, g = row % s.groups;
  const int cpg = s.c / s.groups;
  const std::size_t len = static_cast<std::size_t>(cpg) * s.hw, at = row * len;
  const double mean = stats[sample * 2 * s.groups + g], invstd = stats[sample * 2 * s.groups + s.groups + g];
  const T* dyr = dy + at;
  const T* xr = x + at;
  double sdyw = 0, sdywx = 0;  // sum of dy w and of dy w (x - mean) over the row
  for (std::size_t e = threadIdx.x; e < len; e += blockDim.x) {
    const double dyw = static_cast<double>(to_float(dyr[e])) * w[g * cpg + e / s.hw];
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
    dxr[e] = from_float<T>(k * to_float(dyr[e]) - a - slope * (to_float(xr[e]) - mean_f));
  }
}

// dw, db reduce over samples: one block per channel, so no two blocks write one channel.
template <class T>
__global__ void __launch_bounds__(kChannelBlock)
    group_norm_backward_weight_kernel(float* dw, float* db, const T* dy, const T* x, const float* stats,
                                      cpu::GroupNormShape s, bool accumulate) {
  const int c = blockIdx.x;
  const std::size_t g = c / (s.c / s.groups);
  const ChannelRuns runs{static_cast<std::size_t>(s.hw), static_cast<std::size_t>(s.c) * s.hw};
  const std::size_t count = static_cast<std::size_t>(s.n) * s.hw, first = static_cast<std::size_t>(c) * s.hw;
  double sum_db = 0, sum_dw = 0;
  for (std::size_t e = threadIdx.x; e < count; e += blockDim.x) {
    const std::size_t sample = e / s.hw, i = first + runs.at(e);
    const double mean = stats[sample * 2 * s.groups + g], invstd = stats[sample * 2 * s.groups + s.groups + g];
    const double d = to_float(dy[i]);
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

template <class T>
void batch_norm_forward_train(T* y, float* stats, const T* x, const float* w, const float* b,
                              const cpu::BatchNormShape& s, double eps, double* moments, float* running_mean,
                              float* running_var, int64_t* tracked, double momentum, cudaStream_t stream) {
  const int groups = bn_groups(s, "batch_norm_forward_train");
  CRUMB_CHECK((running_mean == nullptr) == (running_var == nullptr) && (!running_mean || tracked),
              "batch_norm_forward_train: running_mean, running_var and tracked go together");
  if (groups == 0) return;  // nothing to normalise, and no group to count
  const unsigned blocks = s.c > 0 ? static_cast<unsigned>(s.c) : 1u;
  batch_norm_forward_train_kernel<<<blocks, kChannelBlock, 0, stream>>>(y, stats, x, w, b, s, groups, eps, moments,
                                                                        running_mean, running_var, tracked, momentum);
  CRUMB_CUDA_CHECK_LAUNCH();
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
                      const cpu::BatchNormShape& s, cudaStream_t stream) {
  const int groups = bn_groups(s, "batch_norm_apply");
  if (groups == 0 || s.c == 0) return;
  batch_norm_apply_kernel<<<s.c, kChannelBlock, 0, stream>>>(y, x, w, b, stats, s, groups);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void batch_norm_forward_frozen(T* y, float* stats, const T* x, const float* w, const float* b,
                               const float* running_mean, const float* running_var, const cpu::BatchNormShape& s,
                               double eps, cudaStream_t stream) {
  const int groups = bn_groups(s, "batch_norm_forward_frozen");
  if (groups == 0 || s.c == 0) return;
  batch_norm_forward_frozen_kernel<<<s.c, kChannelBlock, 0, stream>>>(y, stats, x, w, b, running_mean, running_var, s,
                                                                      groups, eps);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void batch_norm_backward(float* dw, float* db, T* dx, const T* dy, const T* x, const float* w,
                         const float* stats, const cpu::BatchNormShape& s, bool batch_stats, bool accumulate,
                         cudaStream_t stream) {
  const int groups = bn_groups(s, "batch_norm_backward");
  if (s.c == 0) return;
  // n == 0 still launches: the gradient of an empty batch is zero, which write mode must store.
  batch_norm_backward_kernel<<<s.c, kChannelBlock, 0, stream>>>(dw, db, dx, dy, x, w, stats, s, groups, batch_stats,
                                                                accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void group_norm_forward(T* y, float* stats, const T* x, const float* w, const float* b,
                        const cpu::GroupNormShape& s, double eps, cudaStream_t stream) {
  const unsigned rows = gn_rows(s, "group_norm_forward");
  if (rows == 0 || s.c == 0) return;
  group_norm_forward_kernel<<<rows, kRowBlock, 0, stream>>>(y, stats, x, w, b, s, eps);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void group_norm_backward(float* dw, float* db, T* dx, const T* dy, const T* x, const float* w,
                         const float* stats, const cpu::GroupNormShape& s, bool accumulate, cudaStream_t stream) {
  const unsigned rows = gn_rows(s, "group_norm_backward");
  if (s.c == 0) return;
  if (dx && rows > 0) {
    group_norm_backward_data_kernel<<<rows, kRowBlock, 0, stream>>>(dx, dy, x, w, stats, s);
    CRUMB_CUDA_CHECK_LAUNCH();
  }
  // n == 0 still launches, as above.
  group_norm_backward_weight_kernel<<<s.c, kChannelBlock, 0, stream>>>(dw, db, dy, x, stats, s, accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

#define CRUMB_INSTANTIATE(T)                                                                                    \
  template void batch_norm_forward_train<T>(T*, float*, const T*, const float*, const float*,                       \
                                            const cpu::BatchNormShape&, double, double*, float*, float*, int64_t*, \
                                            double, cudaStream_t);                                                 \
  template void batch_norm_apply<T>(T*, const T*, const float*, const float*, const float*,                        \
                                    const cpu::BatchNormShape&, cudaStream_t);                                     \
  template void batch_norm_forward_frozen<T>(T*, float*, const T*, const float*, const float*, const float*,        \
                                             const float*, const cpu::BatchNormShape&, double, cudaStream_t);      \
  template void batch_norm_backward<T>(float*, float*, T*, const T*, const T*, const float*, const float*,         \
                                       const cpu::BatchNormShape&, bool, bool, cudaStream_t);                      \
  template void group_norm_forward<T>(T*, float*, const T*, const float*, const float*, const cpu::GroupNormShape&, \
                                      double, cudaStream_t);                                                       \
  template void group_norm_backward<T>(float*, float*, T*, const T*, const T*, const float*, const float*,         \
                                       const cpu::GroupNormShape&, bool, cudaStream_t);
CRUMB_CUDA_FOR_FLOAT_TYPES(CRUMB_INSTANTIATE)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cuda
