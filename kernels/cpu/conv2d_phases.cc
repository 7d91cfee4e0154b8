#include "kernels/cpu/conv2d_phases.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/conv2d.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/dpbf16.h"
#include "kernels/cpu/kernel_util.h"

namespace crumb::cpu::detail {
namespace {

// Samples a chunk: the phased input of this many is workspace at a time.
constexpr int kChunk = 8;

std::ptrdiff_t round32(std::ptrdiff_t n) { return (n + 31) / 32 * 32; }

struct Phases {
  int rows, cols;  // phases along h and w: a 1-wide kernel reads even positions only
  Conv2dShape s1;  // the stride-1 convolution over them, for a chunk of samples
  std::ptrdiff_t x_len;  // phased input of a sample: s1.c_in planes of s1.h x s1.w
  std::ptrdiff_t w_len;  // phased weights [c_out][s1.c_in][s1.kh][s1.kw]
  explicit Phases(const Conv2dShape& s) : rows(std::min(2, s.kh)), cols(std::min(2, s.kw)), s1(s) {
    s1.n = std::min(s.n, kChunk);
    s1.c_in = s.c_in * rows * cols;
    s1.kh = (s.kh + 1) / 2, s1.kw = (s.kw + 1) / 2;
    s1.stride_h = s1.stride_w = 1, s1.pad_h = s1.pad_w = 0;
    s1.h = s.h_out + s1.kh - 1, s1.w = s.w_out + s1.kw - 1;
    x_len = std::ptrdiff_t{s1.c_in} * s1.h * s1.w;
    w_len = std::ptrdiff_t{s.c_out} * s1.c_in * s1.kh * s1.kw;
  }
  Conv2dShape chunk(int count) const {
    Conv2dShape c = s1;
    c.n = count;
    return c;
  }
  // Phase channel of input channel c at row and column parities (r, t).
  int channel(int c, int r, int t) const { return (c * rows + r) * cols + t; }
  // A pass's workspace: `head` elements (the phased weights or their gradient), a chunk's phases, then the
  // stride-1 pass's own (`inner` elements).
  struct Parts {
    uint16_t* head;
    uint16_t* phases;
    bf16* inner;
  };
  std::size_t workspace(std::ptrdiff_t head, std::size_t inner) const {
    return static_cast<std::size_t>(round32(head) + round32(s1.n * x_len)) + inner;
  }
  Parts parts(bf16* ws, std::ptrdiff_t head) const {
    auto* h = reinterpret_cast<uint16_t*>(ws);
    uint16_t* phases = h + round32(head);
    return {h, phases, reinterpret_cast<bf16*>(phases + round32(s1.n * x_len))};
  }
  // f(i0, count) for the chunks of n samples.
  template <class F> void for_each_chunk(int n, F&& f) const {
    for (int i0 = 0; i0 < n; i0 += s1.n) f(i0, std::min(s1.n, n - i0));
  }
};

// The run of one input row at column parity t: positions iw0, iw0 + 2, ... of the row are phase
// columns k0, k0 + 1, ... (count of them).
struct ColumnRun {
  int iw0, k0, count;
};
ColumnRun column_run(const Conv2dShape& s, const Phases& p, int t) {
  const int iw0 = ((t - s.pad_w) % 2 + 2) % 2, k0 = (iw0 + s.pad_w) >> 1;
  return {iw0, k0, std::max(0, std::min((s.w - iw0 + 1) / 2, p.s1.w - k0))};
}

// out[m] = in[2 m] and its inverse out[2 m] = in[m], for m < count.
#if CRUMB_DPBF16
CRUMB_TARGET_DPBF16 void take_even(uint16_t* out, const uint16_t* in, int count) {
  for (int m = 0; m < count; m += 16) {
    const int n = std::min(16, count - m);
    // Lanes 0 .. 2 n - 2 are read (no further: the row may end there); the low half of each 32-bit lane.
    const __m512i v = _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1u << (2 * n - 1)) - 1), in + 2 * m);
    _mm256_mask_storeu_epi16(out + m, static_cast<__mmask16>((1u << n) - 1), _mm512_cvtepi32_epi16(v));
  }
}
CRUMB_TARGET_DPBF16 void put_even(uint16_t* out, const uint16_t* in, int count) {
  for (int m = 0; m < count; m += 16) {
    const int n = std::min(16, count - m);
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << n) - 1), in + m));
    // The even 16-bit lanes of the first 2 n - 1: the odd ones keep what the row holds.
    _mm512_mask_storeu_epi16(out + 2 * m, static_cast<__mmask32>(0x55555555u & ((1u << (2 * n - 1)) - 1)), v);
  }
}
#else
void take_even(uint16_t* out, const uint16_t* in, int count) {
  for (int m = 0; m < count; ++m) out[m] = in[2 * m];
}
void put_even(uint16_t* out, const uint16_t* in, int count) {
  for (int m = 0; m < count; ++m) out[2 * m] = in[m];
}
#endif

// Samples [0, count) of x into their phases: xs[j][channel(c, r, t)][i][k] = xp[j][c][2 i + r][2 k + t],
// each input row dealt into its parity's planes, zero elsewhere.
void phase_input(const Conv2dShape& s, const Phases& p, const uint16_t* x, int count, uint16_t* xs) {
  const std::ptrdiff_t plane = std::ptrdiff_t{p.s1.h} * p.s1.w, in_plane = std::ptrdiff_t{s.h} * s.w;
  const std::ptrdiff_t items = std::ptrdiff_t{count} * s.c_in;
#pragma omp parallel for schedule(static) if (items * in_plane > kParallelGrain)
  for (std::ptrdiff_t it = 0; it < items; ++it) {
    const int j = static_cast<int>(it / s.c_in), c = static_cast<int>(it % s.c_in);
    const uint16_t* src = x + (std::ptrdiff_t{j} * s.c_in + c) * in_plane;
    uint16_t* dst = xs + j * p.x_len + p.channel(c, 0, 0) * plane;
    std::fill(dst, dst + p.rows * p.cols * plane, uint16_t{0});
    for (int ih = 0; ih < s.h; ++ih) {
      const int u = ih + s.pad_h, r = u & 1, i = u >> 1;
      if (r >= p.rows || i >= p.s1.h) continue;
      const uint16_t* row = src + std::ptrdiff_t{ih} * s.w;
      for (int t = 0; t < p.cols; ++t) {
        const ColumnRun run = column_run(s, p, t);
        take_even(dst + (r * p.cols + t) * plane + std::ptrdiff_t{i} * p.s1.w + run.k0, row + run.iw0, run.count);
      }
    }
  }
}

// The gradient of samples [0, count) back out of their phases; the positions no tap reads get zero, or
// keep their value where the gradient adds to it.
void unphase_input(const Conv2dShape& s, const Phases& p, const uint16_t* dxs, int count, uint16_t* dx,
                   bool accumulate) {
  const std::ptrdiff_t plane = std::ptrdiff_t{p.s1.h} * p.s1.w, in_plane = std::ptrdiff_t{s.h} * s.w;
  const std::ptrdiff_t items = std::ptrdiff_t{count} * s.c_in;
#pragma omp parallel for schedule(static) if (items * in_plane > kParallelGrain)
  for (std::ptrdiff_t it = 0; it < items; ++it) {
    const int j = static_cast<int>(it / s.c_in), c = static_cast<int>(it % s.c_in);
    uint16_t* dst = dx + (std::ptrdiff_t{j} * s.c_in + c) * in_plane;
    const uint16_t* src = dxs + j * p.x_len + p.channel(c, 0, 0) * plane;
    if (!accumulate) std::fill(dst, dst + in_plane, uint16_t{0});
    for (int ih = 0; ih < s.h; ++ih) {
      const int u = ih + s.pad_h, r = u & 1, i = u >> 1;
      if (r >= p.rows || i >= p.s1.h) continue;
      uint16_t* row = dst + std::ptrdiff_t{ih} * s.w;
      for (int t = 0; t < p.cols; ++t) {
        const ColumnRun run = column_run(s, p, t);
        put_even(row + run.iw0, src + (r * p.cols + t) * plane + std::ptrdiff_t{i} * p.s1.w + run.k0, run.count);
      }
    }
  }
}

// w [c_out][c_in][kh][kw] as the phased weights, zero at the taps past the kernel.
void phase_weights(const Conv2dShape& s, const Phases& p, const uint16_t* w, uint16_t* wp) {
  for (int co = 0; co < s.c_out; ++co)
    for (int c1 = 0; c1 < p.s1.c_in; ++c1)
      for (int a = 0; a < p.s1.kh; ++a)
        for (int b = 0; b < p.s1.kw; ++b) {
          const int c = c1 / (p.rows * p.cols), ki = 2 * a + c1 / p.cols % p.rows, kj = 2 * b + c1 % p.cols;
          *wp++ = ki < s.kh && kj < s.kw ? w[((std::ptrdiff_t{co} * s.c_in + c) * s.kh + ki) * s.kw + kj] : uint16_t{0};
        }
}

}  // namespace

// 1x1 kernels keep their paths: one phase is a subsampled input, which the column matrix already is
// (measured on resnet20's downsampling layers: the phased forward 0.74-0.88x, its gradients even).
bool runs_phased(const Conv2dShape& s) { return runs_phased(s, uses_amx()); }
bool runs_phased(const Conv2dShape& s, bool amx) {
  if (!amx || s.stride_h != 2 || s.stride_w != 2 || s.groups != 1 || (s.kh == 1 && s.kw == 1)) return false;
  return amx_tiles_fit(Phases(s).s1);
}

std::size_t phased_forward_workspace(const Conv2dShape& s) {
  const Phases p(s);
  return p.workspace(p.w_len, conv2d_forward_bf16_workspace(p.s1));
}

template <class B>
void phased_forward(bf16* y, const bf16* x, const bf16* w, const B* b, const Conv2dShape& s, bf16* workspace,
                    bool relu) {
  const Phases p(s);
  const Phases::Parts ws = p.parts(workspace, p.w_len);
  phase_weights(s, p, reinterpret_cast<const uint16_t*>(w), ws.head);
  const std::ptrdiff_t x_len = std::ptrdiff_t{s.c_in} * s.h * s.w, y_len = std::ptrdiff_t{s.c_out} * s.h_out * s.w_out;
  p.for_each_chunk(s.n, [&](int i0, int count) {
    phase_input(s, p, reinterpret_cast<const uint16_t*>(x + i0 * x_len), count, ws.phases);
    conv2d_forward_bf16(y + i0 * y_len, reinterpret_cast<const bf16*>(ws.phases), reinterpret_cast<const bf16*>(ws.head),
                        b, p.chunk(count), ws.inner, relu);
  });
}

std::size_t phased_data_workspace(const Conv2dShape& s) {
  const Phases p(s);
  return p.workspace(p.w_len, conv2d_backward_data_bf16_workspace(p.s1));
}

void phased_data(bf16* dx, const bf16* dy, const bf16* w, const Conv2dShape& s, bf16* workspace, bool accumulate) {
  const Phases p(s);
  const Phases::Parts ws = p.parts(workspace, p.w_len);
  phase_weights(s, p, reinterpret_cast<const uint16_t*>(w), ws.head);
  const std::ptrdiff_t x_len = std::ptrdiff_t{s.c_in} * s.h * s.w, y_len = std::ptrdiff_t{s.c_out} * s.h_out * s.w_out;
  p.for_each_chunk(s.n, [&](int i0, int count) {
    auto* const dx_i = reinterpret_cast<uint16_t*>(dx + i0 * x_len);
    // += adds to dx's own values in their phases: one float32 add and one rounding, as the stride-1 pass.
    if (accumulate) phase_input(s, p, dx_i, count, ws.phases);
    conv2d_backward_data_bf16(reinterpret_cast<bf16*>(ws.phases), dy + i0 * y_len, reinterpret_cast<const bf16*>(ws.head),
                              p.chunk(count), ws.inner, accumulate);
    unphase_input(s, p, ws.phases, count, dx_i, accumulate);
  });
}

std::size_t phased_weight_workspace(const Conv2dShape& s) {
  const Phases p(s);
  return p.workspace(2 * p.w_len, conv2d_backward_weight_amx_workspace(p.s1));
}

void phased_weight(float* dw, float* db, const bf16* dy, const bf16* x, const Conv2dShape& s, bf16* workspace,
                   bool accumulate) {
  const Phases p(s);
  const Phases::Parts ws = p.parts(workspace, 2 * p.w_len);
  auto* const dwp = reinterpret_cast<float*>(ws.head);
  const std::ptrdiff_t x_len = std::ptrdiff_t{s.c_in} * s.h * s.w, y_len = std::ptrdiff_t{s.c_out} * s.h_out * s.w_out;
  p.for_each_chunk(s.n, [&](int i0, int count) {
    phase_input(s, p, reinterpret_cast<const uint16_t*>(x + i0 * x_len), count, ws.phases);
    // Chunks after the first add their sums to the phased gradient's in float32.
    conv2d_backward_weight_amx(dwp, nullptr, dy + i0 * y_len, reinterpret_cast<const bf16*>(ws.phases), p.chunk(count),
                               ws.inner, i0 > 0);
  });
  // dw[co][c][ki][kj] out of the phased gradient; the taps past the kernel are dropped.
#pragma omp parallel for schedule(static) if (p.w_len > kParallelGrain)
  for (int co = 0; co < s.c_out; ++co)
    for (int c = 0; c < s.c_in; ++c)
      for (int ki = 0; ki < s.kh; ++ki)
        for (int kj = 0; kj < s.kw; ++kj) {
          const float v = dwp[((std::ptrdiff_t{co} * p.s1.c_in + p.channel(c, ki % 2, kj % 2)) * p.s1.kh + ki / 2) *
                                  p.s1.kw + kj / 2];
          float& d = dw[((std::ptrdiff_t{co} * s.c_in + c) * s.kh + ki) * s.kw + kj];
          d = accumulate ? d + v : v;
        }
  if (db) bias_gradient(db, dy, s, accumulate);
}

void bias_gradient(float* db, const bf16* dy, const Conv2dShape& s, bool accumulate) {
  const std::ptrdiff_t hw = std::ptrdiff_t{s.h_out} * s.w_out, y_len = s.c_out * hw;
#pragma omp parallel for schedule(static) if (s.n * y_len >= kParallelGrain)
  for (int co = 0; co < s.c_out; ++co) {
    float sum = 0.0f;
    for (int i = 0; i < s.n; ++i) sum += lane_sum(dy + i * y_len + co * hw, hw);
    db[co] = accumulate ? db[co] + sum : sum;
  }
}

template void phased_forward<float>(bf16*, const bf16*, const bf16*, const float*, const Conv2dShape&, bf16*, bool);
template void phased_forward<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const Conv2dShape&, bf16*, bool);

}  // namespace crumb::cpu::detail
