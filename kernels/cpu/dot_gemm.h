// dst[m, k] += a[m, pixels] * b[k, pixels]^T where the depth (pixels) runs along contiguous rows of
// both operands: the weight gradient of a convolution, dy against the (implicit) column matrix. The
// depth is vectorised and each entry summed across lanes at the end.
#pragma once
#include <cstddef>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/ordered_gemm.h"

namespace crumb::cpu::detail {

// Pixels of the depth, possibly in several segments (samples), each `step` elements on from the one
// before in a and in b alike: one offset serves both operands, which keeps the ten row pointers of a
// tile in registers across segments (with separate steps GCC spilled accumulators at every segment).
struct Segments {
  std::ptrdiff_t n;     // pixels per segment, a multiple of the packet size
  int count;            // segments
  std::ptrdiff_t step;  // elements from one segment to the next, in a and b
};

// Left alone, GCC folds each load of b into all R of its fmas, and b's rows start at any offset (the
// taps), so most of those loads split across two cache lines: load-bound at half the fma rate. Pinning
// the loaded packet in a register makes it one load per R fmas.
template <class Packet> inline void in_register(Packet& v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm("" : "+v"(v));
#else
  (void)v;
#endif
}

// dst[r, p] += sum over segments j and pixels q of a[r * lda + j * step + q] * b[p][j * step + q]:
// R x P packet accumulators, so small maps run on through a chunk of samples between two reductions.
// Eigen's packets rather than lane loops: GCC keeps an array of packets in registers, an array of
// floats it spills.
// Eigen's packet types carry vector attributes that GCC drops (and says so) when they are template
// arguments, as Eigen's own code has them everywhere; its system headers just do not warn.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
#endif
template <int R, int P, class T>
inline void dot_tile(T* dst, std::ptrdiff_t ldd, const T* a, std::ptrdiff_t lda, const T* const* b, const Segments& seg) {
  using namespace Eigen::internal;
  using Packet = typename packet_traits<T>::type;
  constexpr int L = unpacket_traits<Packet>::size;
  Packet acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = pset1<Packet>(T(0));
  const T* ar[R];
  for (int r = 0; r < R; ++r) ar[r] = a + r * lda;
  const std::ptrdiff_t end = seg.count * seg.step;
  for (std::ptrdiff_t at = 0; at < end; at += seg.step) {
    for (std::ptrdiff_t q = at; q < at + seg.n; q += L) {
      Packet av[R];
      for (int r = 0; r < R; ++r) av[r] = ploadu<Packet>(ar[r] + q);
      for (int p = 0; p < P; ++p) {
        Packet bv = ploadu<Packet>(b[p] + q);
        in_register(bv);
        for (int r = 0; r < R; ++r) acc[r][p] = pmadd(av[r], bv, acc[r][p]);
      }
    }
  }
  // Lane sums by hand: Eigen's AVX-512 predux trips GCC 12's -Wuninitialized inside the intrinsics.
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) {
      T lanes[L];
      pstoreu(lanes, acc[r][p]);
      T sum(0);
      for (int l = 0; l < L; ++l) sum += lanes[l];
      dst[r * ldd + p] += sum;
    }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Columns [p0, k) of R rows in tiles of P, the tail in narrower tiles; row p of b starts at
// rhs.base + (p / taps) * group_stride + tap[p % taps].
template <int R, int P, class T>
inline void dot_rows(T* dst, std::ptrdiff_t ldd, const T* a, std::ptrdiff_t lda, const RhsRows<T>& rhs, std::ptrdiff_t p0,
              std::ptrdiff_t k, const Segments& seg) {
  std::ptrdiff_t p = p0;
  for (; p + P <= k; p += P) {
    const T* b[P];
    for (int j = 0; j < P; ++j) b[j] = rhs.base + (p + j) / rhs.taps * rhs.group_stride + rhs.tap[(p + j) % rhs.taps];
    dot_tile<R, P>(dst + p, ldd, a, lda, b, seg);
  }
  if constexpr (P > 1) {
    if (p < k) dot_rows<R, P / 2>(dst, ldd, a, lda, rhs, p, k, seg);
  }
}

// dst[m, k] += a[m, pixels] * b[k, pixels]^T, both summed over the segments; rows in tiles of R, the
// tail in narrower ones. With 32 vector registers 4 x 6 packets: 24 accumulators, 4 + 1 more registers;
// with 16, 2 x 5.
template <class T, int R = kVectorRegisters / 8>
void dot_gemm(T* dst, const T* a, std::ptrdiff_t lda, const RhsRows<T>& rhs, std::ptrdiff_t m, const Segments& seg) {
  constexpr int kP = kVectorRegisters == 32 ? 6 : 5;
  const std::ptrdiff_t k = std::ptrdiff_t{rhs.groups} * rhs.taps;
  std::ptrdiff_t i = 0;
  for (; i + R <= m; i += R) dot_rows<R, kP>(dst + i * k, k, a + i * lda, lda, rhs, 0, k, seg);
  if constexpr (R > 1) {
    if (i < m) dot_gemm<T, R / 2>(dst + i * k, a + i * lda, lda, rhs, m - i, seg);
  }
}

}  // namespace crumb::cpu::detail
