#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/kernels.h"

namespace crumb::cpu {
namespace {
using detail::kParallelGrain;
using detail::put;
using detail::with_write_mode;

// A pooling window clipped to the image, so padding cells are simply never visited.
struct Window {
  std::ptrdiff_t out;  // index of the window's output within its plane
  int h0, h1, w0, w1;  // half-open input rows / columns
};

// Runs f(plane) for every (sample, channel) plane; planes are independent, so they split across
// threads without any write conflicts, even for overlapping windows.
template <class F> void for_each_plane(const Pool2dShape& s, F&& f) {
  const std::ptrdiff_t planes = std::ptrdiff_t{s.n} * s.c;
#pragma omp parallel for schedule(static) if (planes * s.h * s.w > kParallelGrain)
  for (std::ptrdiff_t p = 0; p < planes; ++p) f(p);
}

template <class F> void for_each_window(const Pool2dShape& s, F&& f) {
  std::ptrdiff_t out = 0;
  for (int oh = 0; oh < s.h_out; ++oh) {
    const int h0 = oh * s.stride_h - s.pad_h;
    const int h1 = std::min(h0 + s.kh, s.h);
    for (int ow = 0; ow < s.w_out; ++ow, ++out) {
      const int w0 = ow * s.stride_w - s.pad_w;
      f(Window{out, std::max(h0, 0), h1, std::max(w0, 0), std::min(w0 + s.kw, s.w)});
    }
  }
}

// Index within the plane of the window's first maximum in row-major scan order. NaN wins, as in
// PyTorch, so a diverged activation is not silently hidden by the pool.
template <class T> std::ptrdiff_t first_max(const T* plane, int w, const Window& win) {
  assert(win.h0 < win.h1 && win.w0 < win.w1);
  std::ptrdiff_t best = std::ptrdiff_t{win.h0} * w + win.w0;
  T m = plane[best];
  for (int ih = win.h0; ih < win.h1; ++ih) {
    for (int iw = win.w0; iw < win.w1; ++iw) {
      const std::ptrdiff_t i = std::ptrdiff_t{ih} * w + iw;
      const T v = plane[i];
      const bool take = (v > m) | (v != v);
      m = take ? v : m;
      best = take ? i : best;
    }
  }
  return best;
}

std::ptrdiff_t in_plane(const Pool2dShape& s) { return std::ptrdiff_t{s.h} * s.w; }
std::ptrdiff_t out_plane(const Pool2dShape& s) { return std::ptrdiff_t{s.h_out} * s.w_out; }

// Routes each window's dy through route(dx_plane, x_plane, window, dy_value), after clearing dx
// unless accumulating; shared by the max and average backward passes.
template <class T, class Route>
void pool_backward(T* dx, const T* dy, const T* x, const Pool2dShape& s, bool accumulate, Route&& route) {
  for_each_plane(s, [&](std::ptrdiff_t p) {
    T* dxp = dx + p * in_plane(s);
    if (!accumulate) std::fill(dxp, dxp + in_plane(s), T(0));
    const T* xp = x ? x + p * in_plane(s) : nullptr;
    const T* dyp = dy + p * out_plane(s);
    for_each_window(s, [&](const Window& win) { route(dxp, xp, win, dyp[win.out]); });
  });
}

}  // namespace

template <class T> void max_pool2d_forward(T* y, const T* x, const Pool2dShape& s) {
  for_each_plane(s, [&](std::ptrdiff_t p) {
    const T* xp = x + p * in_plane(s);
    T* yp = y + p * out_plane(s);
    for_each_window(s, [&](const Window& win) { yp[win.out] = xp[first_max(xp, s.w, win)]; });
  });
}

template <class T> void max_pool2d_backward(T* dx, const T* dy, const T* x, const Pool2dShape& s, bool accumulate) {
  pool_backward(dx, dy, x, s, accumulate,
                [&](T* dxp, const T* xp, const Window& win, T g) { dxp[first_max(xp, s.w, win)] += g; });
}

template <class T> void avg_pool2d_forward(T* y, const T* x, const Pool2dShape& s) {
  const T inv_area = T(1) / (s.kh * s.kw);
  for_each_plane(s, [&](std::ptrdiff_t p) {
    const T* xp = x + p * in_plane(s);
    T* yp = y + p * out_plane(s);
    for_each_window(s, [&](const Window& win) {
      T sum = 0;
      for (int ih = win.h0; ih < win.h1; ++ih) {
        for (int iw = win.w0; iw < win.w1; ++iw) sum += xp[std::ptrdiff_t{ih} * s.w + iw];
      }
      yp[win.out] = sum * inv_area;
    });
  });
}

template <class T> void avg_pool2d_backward(T* dx, const T* dy, const Pool2dShape& s, bool accumulate) {
  const T inv_area = T(1) / (s.kh * s.kw);
  pool_backward(dx, dy, static_cast<const T*>(nullptr), s, accumulate,
                [&](T* dxp, const T*, const Window& win, T g) {
                  for (int ih = win.h0; ih < win.h1; ++ih) {
                    for (int iw = win.w0; iw < win.w1; ++iw) dxp[std::ptrdiff_t{ih} * s.w + iw] += g * inv_area;
                  }
                });
}

template <class T> void global_avg_pool_forward(T* y, const T* x, int n, int c, int hw) {
  const std::ptrdiff_t rows = std::ptrdiff_t{n} * c;
  const T inv = T(1) / hw;
#pragma omp parallel for schedule(static) if (rows * hw > kParallelGrain)
  for (std::ptrdiff_t r = 0; r < rows; ++r) {
    const T* xr = x + r * hw;
    T sum = 0;
    for (int j = 0; j < hw; ++j) sum += xr[j];
    y[r] = sum * inv;
  }
}

template <class T> void global_avg_pool_backward(T* dx, const T* dy, int n, int c, int hw, bool accumulate) {
  const std::ptrdiff_t rows = std::ptrdiff_t{n} * c;
  const T inv = T(1) / hw;
  with_write_mode(accumulate, [&](auto acc) {
#pragma omp parallel for schedule(static) if (rows * hw > kParallelGrain)
    for (std::ptrdiff_t r = 0; r < rows; ++r) {
      const T g = dy[r] * inv;
      T* dxr = dx + r * hw;
      for (int j = 0; j < hw; ++j) put(acc, dxr[j], g);
    }
  });
}

#define CRUMB_INSTANTIATE(T)                                                                   \
  template void max_pool2d_forward<T>(T*, const T*, const Pool2dShape&);                      \
  template void max_pool2d_backward<T>(T*, const T*, const T*, const Pool2dShape&, bool);     \
  template void avg_pool2d_forward<T>(T*, const T*, const Pool2dShape&);                      \
  template void avg_pool2d_backward<T>(T*, const T*, const Pool2dShape&, bool);               \
  template void global_avg_pool_forward<T>(T*, const T*, int, int, int);                      \
  template void global_avg_pool_backward<T>(T*, const T*, int, int, int, bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(double)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cpu
