// Elementwise kernels: activations (ReLU, LeakyReLU, Hardtanh), sums, copies and the per-channel
// broadcasts (bias add, global-average-pool backward), for every storage type (float, bf16, f16),
// computing in float32. All are memory bound; each thread touches its own elements of every array only,
// which is what makes the documented in-place aliasing safe. The maps (activations, add, copy) load and
// store 16 bytes at a time (4 floats, 8 16-bit values) where every array is 16-byte aligned, which the
// engine's arena is.
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_util.cuh"
#include "kernels/elementwise.h"

namespace crumb::cuda {
namespace {
using detail::blocks_for;
using detail::global_index;
using detail::kBlock;
using detail::nchw_count;
using detail::put;

// The maps: out (=|+=) f(a[i], b[i]) (b unused by the one-input maps).
struct Relu {
  // NaN propagates, as in the CPU kernel and PyTorch.
  __device__ float operator()(float x, float) const { return x <= 0.0f ? 0.0f : x; }
};
struct ReluBackward {  // a = dy, b = y
  __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy : 0.0f; }
};
// NaN fails every comparison: it passes through the forwards and stops the gradient, as on the CPU.
struct LeakyRelu {
  float slope;
  __device__ float operator()(float x, float) const { return x < 0.0f ? slope * x : x; }
};
struct LeakyReluBackward {  // a = dy, b = y
  float slope;
  __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy : y <= 0.0f ? slope * dy : 0.0f; }
};
struct Hardtanh {
  float lo, hi;
  __device__ float operator()(float x, float) const { return x < lo ? lo : x > hi ? hi : x; }
};
struct HardtanhBackward {  // a = dy, b = y
  float lo, hi;
  __device__ float operator()(float dy, float y) const { return y > lo && y < hi ? dy : 0.0f; }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Copy {
  __device__ float operator()(float x, float) const { return x; }
};

// Elements one 16-byte load carries.
template <class T> constexpr int kPack = 16 / sizeof(T);
template <class T> struct alignas(16) Pack {
  T v[kPack<T>];
};

// Thread t maps elements [t * kPack, (t + 1) * kPack): one 16-byte load per array when `packed` (every
// array 16-byte aligned), else element by element; the last thread's pack may be partial. Not
// __restrict__: out may alias a or b, and each thread reads its elements before it writes them.
template <class T, class F>
__global__ void map_kernel(T* out, const T* a, const T* b, std::size_t count, bool accumulate, bool packed, F f) {
  constexpr int kN = kPack<T>;
  const std::size_t first = global_index() * kN;
  if (first >= count) return;
  if (packed && first + kN <= count) {
    const Pack<T> pa = *reinterpret_cast<const Pack<T>*>(a + first);
    Pack<T> pb{}, po{};
    if (b) pb = *reinterpret_cast<const Pack<T>*>(b + first);
    if (accumulate) po = *reinterpret_cast<const Pack<T>*>(out + first);
#pragma unroll
    for (int j = 0; j < kN; ++j) put(po.v[j], f(to_float(pa.v[j]), b ? to_float(pb.v[j]) : 0.0f), accumulate);
    *reinterpret_cast<Pack<T>*>(out + first) = po;
    return;
  }
  const std::size_t last = first + kN < count ? first + kN : count;
  for (std::size_t i = first; i < last; ++i) put(out[i], f(to_float(a[i]), b ? to_float(b[i]) : 0.0f), accumulate);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <class T, class F>
void map(T* out, const T* a, const T* b, std::size_t count, bool accumulate, cudaStream_t stream, F f = F{}) {
  if (count == 0) return;
  const bool packed = aligned16(out) && aligned16(a) && (!b || aligned16(b));
  const std::size_t threads = (count + kPack<T> - 1) / kPack<T>;
  map_kernel<<<blocks_for(threads), kBlock, 0, stream>>>(out, a, b, count, accumulate, packed, f);
  CRUMB_CUDA_CHECK_LAUNCH();
}

// y [rows = n * c, hw]: element i belongs to channel (i / hw) % c.
template <class T> __global__ void bias_add_nchw_kernel(T* y, const T* b, std::size_t count, int c, int hw) {
  const std::size_t i = global_index();
  if (i < count) y[i] = from_float<T>(to_float(y[i]) + to_float(b[(i / hw) % c]));
}

// dx [rows, hw], dy [rows]: every element of a row gets the row's share dy / hw.
template <class T>
__global__ void global_avg_pool_backward_kernel(T* dx, const T* dy, std::size_t count, int hw, float inv_hw,
                                                bool accumulate) {
  const std::size_t i = global_index();
  if (i < count) put(dx[i], to_float(dy[i / hw]) * inv_hw, accumulate);
}

}  // namespace

template <class T> void relu_forward(T* y, const T* x, std::size_t count, cudaStream_t stream) {
  map<T, Relu>(y, x, nullptr, count, false, stream);
}

template <class T>
void relu_backward(T* dx, const T* dy, const T* y, std::size_t count, bool accumulate, cudaStream_t stream) {
  map<T, ReluBackward>(dx, dy, y, count, accumulate, stream);
}

template <class T> void leaky_relu_forward(T* y, const T* x, std::size_t count, float slope, cudaStream_t stream) {
  map<T, LeakyRelu>(y, x, nullptr, count, false, stream, LeakyRelu{slope});
}

template <class T>
void leaky_relu_backward(T* dx, const T* dy, const T* y, std::size_t count, float slope, bool accumulate,
                         cudaStream_t stream) {
  map<T, LeakyReluBackward>(dx, dy, y, count, accumulate, stream, LeakyReluBackward{slope});
}

template <class T> void hardtanh_forward(T* y, const T* x, std::size_t count, float lo, float hi, cudaStream_t stream) {
  map<T, Hardtanh>(y, x, nullptr, count, false, stream, Hardtanh{lo, hi});
}

template <class T>
void hardtanh_backward(T* dx, const T* dy, const T* y, std::size_t count, float lo, float hi, bool accumulate,
                       cudaStream_t stream) {
  // The bounds as the forward stored them (see the CPU twin).
  map<T, HardtanhBackward>(dx, dy, y, count, accumulate, stream,
                           HardtanhBackward{to_float(from_float<T>(lo)), to_float(from_float<T>(hi))});
}

template <class T> void add_forward(T* y, const T* a, const T* b, std::size_t count, cudaStream_t stream) {
  map<T, Add>(y, a, b, count, false, stream);
}

template <class T> void copy_or_accumulate(T* y, const T* x, std::size_t count, bool accumulate, cudaStream_t stream) {
  map<T, Copy>(y, x, nullptr, count, accumulate, stream);
}

template <class T> void bias_add_nchw(T* y, const T* b, int n, int c, int hw, cudaStream_t stream) {
  const std::size_t count = nchw_count(n, c, hw, "bias_add_nchw");
  if (count == 0) return;
  bias_add_nchw_kernel<<<blocks_for(count), kBlock, 0, stream>>>(y, b, count, c, hw);
  CRUMB_CUDA_CHECK_LAUNCH();
}

template <class T>
void global_avg_pool_backward(T* dx, const T* dy, int n, int c, int hw, bool accumulate, cudaStream_t stream) {
  const std::size_t count = nchw_count(n, c, hw, "global_avg_pool_backward");
  if (count == 0) return;
  // 1/hw rounded once, then multiplied, as the CPU kernel does.
  const float inv_hw = 1.0f / static_cast<float>(hw);
  global_avg_pool_backward_kernel<<<blocks_for(count), kBlock, 0, stream>>>(dx, dy, count, hw, inv_hw, accumulate);
  CRUMB_CUDA_CHECK_LAUNCH();
}

#define CRUMB_INSTANTIATE(T)                                                                                  \
  template void relu_forward<T>(T*, const T*, std::size_t, cudaStream_t);                                    \
  template void relu_backward<T>(T*, const T*, const T*, std::size_t, bool, cudaStream_t);                   \
  template void leaky_relu_forward<T>(T*, const T*, std::size_t, float, cudaStream_t);                      \
  template void leaky_relu_backward<T>(T*, const T*, const T*, std::size_t, float, bool, cudaStream_t);      \
  template void hardtanh_forward<T>(T*, const T*, std::size_t, float, float, cudaStream_t);                  \
  template void hardtanh_backward<T>(T*, const T*, const T*, std::size_t, float, float, bool, cudaStream_t);  \
  template void add_forward<T>(T*, const T*, const T*, std::size_t, cudaStream_t);                           \
  template void copy_or_accumulate<T>(T*, const T*, std::size_t, bool, cudaStream_t);                        \
  template void bias_add_nchw<T>(T*, const T*, int, int, int, cudaStream_t);                                 \
  template void global_avg_pool_backward<T>(T*, const T*, int, int, int, bool, cudaStream_t);
CRUMB_CUDA_FOR_FLOAT_TYPES(CRUMB_INSTANTIATE)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cuda
