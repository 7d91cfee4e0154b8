// The bf16 linear forward on AVX512_BF16's vdpbf16ps: each output is the dot product of a row of x and a
// row of w (both contiguous along `in`), 32 bf16 pairs of products per instruction into 16 float32
// lanes, the lanes summed at the end. Every output takes the same sequence of operations whatever the
// batch and wherever it falls in a tile, so the micro-batch size does not change it.
#include <algorithm>
#include <cstdint>

#include "engine/base/error.h"
#include "kernels/cpu/dpbf16.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/linear.h"


namespace crumb::cpu {

#if CRUMB_DPBF16
namespace {

// y[r, p] for R rows of x and P rows of w: R x P accumulators of 16 lanes, the last partial block of
// `in` read under a mask (its missing pairs are zeros and add nothing).
template <int R, int P, class B>
CRUMB_TARGET_DPBF16 void dot_tile(bf16* y, int ldy, const bf16* x, const bf16* w, const B* b, int in, bool relu) {
  __m512 acc[R][P];
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int k = 0; k < in; k += 32) {
    const __mmask32 mask = in - k >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << (in - k)) - 1);
    __m512bh xv[R];
    for (int r = 0; r < R; ++r) xv[r] = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + std::ptrdiff_t{r} * in + k);
    for (int p = 0; p < P; ++p) {
      const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + std::ptrdiff_t{p} * in + k);
      for (int r = 0; r < R; ++r) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], xv[r], wv);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int p = 0; p < P; ++p) {
      float v = detail::sum_lanes(acc[r][p]);
      if (b) v += to_float(b[p]);
      // relu_forward's rule: NaN propagates, -0 becomes 0.
      if (relu && v <= 0.0f) v = 0.0f;
      y[std::ptrdiff_t{r} * ldy + p] = to_bf16(v);
    }
}

constexpr int kTile = 4;

// dot_tile with R, P (each 1 to kTile) chosen at run time, for the edges.
template <class B>
void dot_tile_any(int rows, int cols, bf16* y, int ldy, const bf16* x, const bf16* w, const B* b, int in, bool relu) {
  using Fn = void (*)(bf16*, int, const bf16*, const bf16*, const B*, int, bool);
  static constexpr Fn table[kTile][kTile] = {
      {dot_tile<1, 1, B>, dot_tile<1, 2, B>, dot_tile<1, 3, B>, dot_tile<1, 4, B>},
      {dot_tile<2, 1, B>, dot_tile<2, 2, B>, dot_tile<2, 3, B>, dot_tile<2, 4, B>},
      {dot_tile<3, 1, B>, dot_tile<3, 2, B>, dot_tile<3, 3, B>, dot_tile<3, 4, B>},
      {dot_tile<4, 1, B>, dot_tile<4, 2, B>, dot_tile<4, 3, B>, dot_tile<4, 4, B>}};
  table[rows - 1][cols - 1](y, ldy, x, w, b, in, relu);
}

}  // namespace
#endif

template <class B>
void linear_forward_bf16(bf16* y, const bf16* x, const bf16* w, const B* b, int n, int in, int out, bool relu) {
#if CRUMB_DPBF16
  CRUMB_CHECK(has_bf16_dot(), "linear_forward_bf16: this CPU has no AVX512_BF16 (check has_bf16_dot() first)");
  detail::parallel_ranges(out, 1.0 * n * in * out, [&](Eigen::Index o0, Eigen::Index o1) {
    for (Eigen::Index o = o0; o < o1; o += kTile) {
      const int cols = static_cast<int>(std::min<Eigen::Index>(kTile, o1 - o));
      for (int r = 0; r < n; r += kTile)
        dot_tile_any(std::min(kTile, n - r), cols, y + std::ptrdiff_t{r} * out + o, out, x + std::ptrdiff_t{r} * in,
                     w + o * in, b ? b + o : nullptr, in, relu);
    }
  });
#else
  (void)y, (void)x, (void)w, (void)b, (void)n, (void)in, (void)out, (void)relu;
  CRUMB_FAIL("linear_forward_bf16: this build has no AVX512_BF16 kernels (check has_bf16_dot() first)");
#endif
}

template void linear_forward_bf16<float>(bf16*, const bf16*, const bf16*, const float*, int, int, int, bool);
template void linear_forward_bf16<bf16>(bf16*, const bf16*, const bf16*, const bf16*, int, int, int, bool);

}  // namespace crumb::cpu
