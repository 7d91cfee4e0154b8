// Shapes passed to the CPU kernels. Plain structs so a kernel call spells out every dimension.
#pragma once
#include <cstddef>

#include "engine/base/tensor.h"
#include "kernels/host_device.h"

namespace crumb::cpu {

// conv2d on NCHW tensors. x [n, c_in, h, w], w [c_out, c_in / groups, kh, kw], y [n, c_out, h_out, w_out].
// groups divides c_in and c_out: input channels [k * c_in / groups, (k + 1) * c_in / groups) feed output
// channels [k * c_out / groups, (k + 1) * c_out / groups) only (groups == c_in: depthwise).
struct Conv2dShape {
  int n, c_in, h, w;
  int c_out, kh, kw;
  int stride_h, stride_w, pad_h, pad_w;
  int h_out, w_out;
  int groups = 1;
  // The weight gradient one slice of samples at a time in one slice's workspace (conv2d.h): slower, the
  // same bits, a fraction of the scratch.
  bool lean = false;
  long long in_count() const { return 1LL * n * c_in * h * w; }
  long long out_count() const { return 1LL * n * c_out * h_out * w_out; }
};

// 2-D pooling on NCHW tensors. x [n, c, h, w], y [n, c, h_out, w_out].
struct Pool2dShape {
  int n, c, h, w;
  int kh, kw, stride_h, stride_w, pad_h, pad_w;
  int h_out, w_out;
  // The CUDA kernels also take NHWC (channels-last plans, engine/plan/layout.h); the CPU's read NCHW
  // (an NHWC node runs them on NCHW copies).
  Layout layout = Layout::NCHW;
};

// Adaptive average pooling on NCHW tensors, x [n, c, h, w] -> y [n, c, h_out, w_out]: output row i
// averages input rows [floor(i * h / h_out), ceil((i + 1) * h / h_out)), likewise columns (PyTorch's
// bins). Bins may overlap (h not a multiple of h_out) and repeat an input row (h_out > h: upsampling).
struct AdaptivePool2dShape {
  int n, c, h, w;
  int h_out, w_out;
  Layout layout = Layout::NCHW;  // as Pool2dShape's
};
// Bin i of `out` bins over `in` cells is [adaptive_begin, adaptive_end); input cell r lies in bins
// adaptive_first_bin(r) .. adaptive_last_bin(r) (the inverse, for the backward's gather).
CRUMB_HOST_DEVICE int adaptive_begin(int i, int in, int out) { return i * in / out; }
CRUMB_HOST_DEVICE int adaptive_end(int i, int in, int out) { return ((i + 1) * in + out - 1) / out; }
CRUMB_HOST_DEVICE int adaptive_first_bin(int r, int in, int out) { return r * out / in; }
CRUMB_HOST_DEVICE int adaptive_last_bin(int r, int in, int out) { return ((r + 1) * out - 1) / in; }

// Normalisation of x [n, c, hw] (NCHW with hw = h * w), with a per-channel affine y = xhat * w[c] + b[c].
// BatchNorm: each channel of each group of `group` consecutive samples is normalised over the group's
// values of that channel (the last group may be shorter), so ceil(n / group) groups.
struct BatchNormShape {
  int n, c, hw, group;
  // The CUDA kernels also take NHWC (channels-last plans, engine/plan/layout.h); the CPU's read NCHW
  // (an NHWC node runs them on NCHW copies).
  Layout layout = Layout::NCHW;
  int groups() const { return (n + group - 1) / group; }
  // Samples in group g.
  int group_size(int g) const { return n - g * group < group ? n - g * group : group; }
};
// GroupNorm: the c channels of each sample form `groups` groups of c / groups consecutive channels, each
// normalised over its (c / groups) * hw values; independent of the other samples.
struct GroupNormShape {
  int n, c, hw, groups;
};

}  // namespace crumb::cpu
