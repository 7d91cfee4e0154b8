// Shapes passed to the CPU kernels. Plain structs so a kernel call spells out every dimension.
#pragma once
#include <cstddef>

namespace crumb::cpu {

// conv2d on NCHW tensors. x [n, c_in, h, w], w [c_out, c_in, kh, kw], y [n, c_out, h_out, w_out].
struct Conv2dShape {
  int n, c_in, h, w;
  int c_out, kh, kw;
  int stride_h, stride_w, pad_h, pad_w;
  int h_out, w_out;
  long long in_count() const { return 1LL * n * c_in * h * w; }
  long long out_count() const { return 1LL * n * c_out * h_out * w_out; }
};

// 2-D pooling on NCHW tensors. x [n, c, h, w], y [n, c, h_out, w_out].
struct Pool2dShape {
  int n, c, h, w;
  int kh, kw, stride_h, stride_w, pad_h, pad_w;
  int h_out, w_out;
};

}  // namespace crumb::cpu
