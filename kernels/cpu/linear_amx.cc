// The bf16 linear layer's three passes on AMX tiles: each a GEMM C = A B of float32 sums, A bf16 rows
// (16 of them by 32 values a tile), B pairs of rows interleaved (TDPBF16PS's layout: 16 pairs of rows by
// 16 columns), both packed into the workspace with zeros past the operands' edges:
//   forward  y [n, out]   = x [n, in] w^T:  A = x,    B = w transposed by pairs of columns;
//   data     dx [n, in]   = dy [n, out] w:  A = dy,   B = w by pairs of rows;
//   weight   dw [out, in] = dy^T x:         A = dy^T, B = x by pairs of rows (the sum over the samples).
// Each sum runs over its K in order, 32 products a step, whatever else shares its tile: a sample's
// forward output does not depend on the batch it runs in, and no result on the thread count.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/base/error.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/dpbf16.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/linear.h"

namespace crumb::cpu {
namespace {

std::ptrdiff_t up(std::ptrdiff_t v, std::ptrdiff_t to) { return (v + to - 1) / to * to; }

bool parallel(double macs) { return macs >= detail::kParallelMacs; }

// src [rows, cols] (ld apart) into dst [up(rows, 16), up(cols, 32)], zeros past the edges.
void pad_rows(const uint16_t* src, std::ptrdiff_t ld, std::ptrdiff_t rows, std::ptrdiff_t cols, uint16_t* dst) {
  const std::ptrdiff_t dr = up(rows, 16), dc = up(cols, 32);
#pragma omp parallel for schedule(static) if (parallel(1.0 * dr * dc))
  for (std::ptrdiff_t r = 0; r < dr; ++r) {
    uint16_t* d = dst + r * dc;
    const std::ptrdiff_t n = r < rows ? cols : 0;
    if (n) std::memcpy(d, src + r * ld, sizeof(uint16_t) * n);
    std::fill(d + n, d + dc, uint16_t{0});
  }
}

// src [rows, cols] (ld apart) by pairs of rows: dst[p][c] = (src[2p][c], src[2p + 1][c]), dst
// [up(rows, 32) / 2, up(cols, 16)], zeros past the edges.
void pair_rows(const uint16_t* src, std::ptrdiff_t ld, std::ptrdiff_t rows, std::ptrdiff_t cols, uint32_t* dst) {
  const std::ptrdiff_t pairs = up(rows, 32) / 2, dc = up(cols, 16);
#pragma omp parallel for schedule(static) if (parallel(2.0 * pairs * dc))
  for (std::ptrdiff_t p = 0; p < pairs; ++p) {
    uint32_t* d = dst + p * dc;
    const uint16_t* a = 2 * p < rows ? src + 2 * p * ld : nullptr;
    const uint16_t* b = 2 * p + 1 < rows ? src + (2 * p + 1) * ld : nullptr;
    const std::ptrdiff_t n = a ? cols : 0;
#pragma omp simd
    for (std::ptrdiff_t c = 0; c < n; ++c) d[c] = uint32_t{a[c]} | (b ? uint32_t{b[c]} << 16 : 0u);
    std::fill(d + n, d + dc, 0u);
  }
}

#if CRUMB_DPBF16
// src [rows, cols] of 32-bit entries (both multiples of 16) into dst [cols, rows].
void transpose(const uint32_t* src, std::ptrdiff_t rows, std::ptrdiff_t cols, uint32_t* dst) {
  const std::ptrdiff_t blocks = rows / 16 * (cols / 16);
#pragma omp parallel for schedule(static) if (parallel(16.0 * rows * cols))
  for (std::ptrdiff_t b = 0; b < blocks; ++b) {
    const std::ptrdiff_t r = b / (cols / 16) * 16, c = b % (cols / 16) * 16;
    detail::transpose16x16(src + r * cols + c, cols, dst + c * rows + r, rows);
  }
}

// C [m, n] = A [m, k] B, A bf16 rows (lda elements apart), B [k / 2, n] pairs (ldb apart); m and n
// multiples of 16, k of 32.
template <int M, int N>
CRUMB_TARGET_AMX void gemm_block(float* c, std::ptrdiff_t ldc, const uint16_t* a, std::ptrdiff_t lda, const uint32_t* b,
                                 std::ptrdiff_t ldb, std::ptrdiff_t k) {
  detail::tiles_zero<M, N>();
  for (std::ptrdiff_t q = 0; q < k; q += 32)
    detail::tiles_step<M, N>(a + q, static_cast<long>(lda * 2), b + q / 2 * ldb, static_cast<long>(ldb * 4));
  detail::tiles_store<M, N>(c, static_cast<long>(ldc * 4));
}

using BlockFn = void (*)(float*, std::ptrdiff_t, const uint16_t*, std::ptrdiff_t, const uint32_t*, std::ptrdiff_t,
                         std::ptrdiff_t);
constexpr BlockFn kBlocks[2][2] = {{gemm_block<1, 1>, gemm_block<1, 2>}, {gemm_block<2, 1>, gemm_block<2, 2>}};

void gemm(float* c, const uint16_t* a, const uint32_t* b, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k) {
  const std::ptrdiff_t mb = (m / 16 + 1) / 2, nb = (n / 16 + 1) / 2;
#pragma omp parallel if (parallel(1.0 * m * n * k))
  {
    detail::configure_square_tiles();
#pragma omp for schedule(static)
    for (std::ptrdiff_t blk = 0; blk < mb * nb; ++blk) {
      const std::ptrdiff_t i = blk / nb * 32, j = blk % nb * 32;
      kBlocks[m - i >= 32 ? 1 : 0][n - j >= 32 ? 1 : 0](c + i * n + j, n, a + i * k, k, b + j, n, k);
    }
    detail::release_tiles();
  }
}

// 16 bias values from b (float32 or bf16) under mask m.
CRUMB_TARGET_DPBF16 inline __m512 bias_lanes(const float* b, __mmask16 m) { return _mm512_maskz_loadu_ps(m, b); }
CRUMB_TARGET_DPBF16 inline __m512 bias_lanes(const bf16* b, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, b)), 16));
}

// rows x cols of C (ldc apart) into bf16 out (ld apart): + bias, ReLU (relu_forward's rule: NaN propagates,
// -0 becomes 0), or added to what out holds in float32, then rounded once (half.h's to_bf16).
template <class B>
CRUMB_TARGET_DPBF16 void store_rows(bf16* out, std::ptrdiff_t ld, const float* c, std::ptrdiff_t ldc,
                                    std::ptrdiff_t rows, std::ptrdiff_t cols, const B* bias, bool relu,
                                    bool accumulate) {
#pragma omp parallel for schedule(static) if (parallel(1.0 * rows * cols))
  for (std::ptrdiff_t r = 0; r < rows; ++r)
    for (std::ptrdiff_t j = 0; j < cols; j += 16) {
      const auto m = static_cast<__mmask16>(cols - j >= 16 ? 0xffff : (1u << (cols - j)) - 1);
      auto* o = reinterpret_cast<uint16_t*>(out + r * ld + j);
      __m512 v = _mm512_maskz_loadu_ps(m, c + r * ldc + j);
      if (bias) v = _mm512_add_ps(v, bias_lanes(bias + j, m));
      if (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LE_OQ), _mm512_setzero_ps());
      if (accumulate)
        v = _mm512_add_ps(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, o)), 16)),
                          v);
      _mm256_mask_storeu_epi16(o, m, detail::to_bf16_lanes(v));
    }
}
#endif

void check_amx(const char* what) {
  CRUMB_CHECK(uses_amx(), what, ": this CPU has no AMX-BF16, or the process was not granted it (check uses_amx())");
}

}  // namespace

std::size_t linear_amx_workspace(int n, int in, int out) {
  // The largest pass: A, B and the float32 sums, each padded.
  const std::ptrdiff_t n16 = up(n, 16), n32 = up(n, 32), in16 = up(in, 16), in32 = up(in, 32), out16 = up(out, 16),
                       out32 = up(out, 32);
  const std::ptrdiff_t fwd = n16 * in32 + 2 * out16 * in32 + 2 * n16 * out16;
  const std::ptrdiff_t data = n16 * out32 + out32 * in16 + 2 * n16 * in16;
  const std::ptrdiff_t weight = 2 * n32 * out16 + n32 * in16 + 2 * out16 * in16;
  return static_cast<std::size_t>(std::max({fwd, data, weight}));
}

template <class B>
void linear_forward_amx(bf16* y, const bf16* x, const bf16* w, const B* b, int n, int in, int out, bf16* workspace,
                        bool relu) {
  check_amx("linear_forward_amx");
#if CRUMB_DPBF16
  const std::ptrdiff_t n16 = up(n, 16), in32 = up(in, 32), out16 = up(out, 16);
  auto* const xa = reinterpret_cast<uint16_t*>(workspace);
  uint16_t* const wpad = xa + n16 * in32;                         // w [out16, in32], then by pairs of columns:
  auto* const wb = reinterpret_cast<uint32_t*>(wpad + out16 * in32);  // [in32 / 2, out16]
  auto* const c = reinterpret_cast<float*>(wb + in32 / 2 * out16);
  pad_rows(reinterpret_cast<const uint16_t*>(x), in, n, in, xa);
  pad_rows(reinterpret_cast<const uint16_t*>(w), in, out, in, wpad);
  transpose(reinterpret_cast<const uint32_t*>(wpad), out16, in32 / 2, wb);
  gemm(c, xa, wb, n16, out16, in32);
  store_rows(y, out, c, out16, n, out, b, relu, false);
#else
  (void)y, (void)x, (void)w, (void)b, (void)n, (void)in, (void)out, (void)workspace, (void)relu;
#endif
}

void linear_backward_data_amx(bf16* dx, const bf16* dy, const bf16* w, int n, int in, int out, bf16* workspace,
                              bool accumulate) {
  check_amx("linear_backward_data_amx");
#if CRUMB_DPBF16
  const std::ptrdiff_t n16 = up(n, 16), in16 = up(in, 16), out32 = up(out, 32);
  auto* const da = reinterpret_cast<uint16_t*>(workspace);
  auto* const wb = reinterpret_cast<uint32_t*>(da + n16 * out32);  // [out32 / 2, in16]
  auto* const c = reinterpret_cast<float*>(wb + out32 / 2 * in16);
  pad_rows(reinterpret_cast<const uint16_t*>(dy), out, n, out, da);
  pair_rows(reinterpret_cast<const uint16_t*>(w), in, out, in, wb);
  gemm(c, da, wb, n16, in16, out32);
  store_rows(dx, in, c, in16, n, in, static_cast<const float*>(nullptr), false, accumulate);
#else
  (void)dx, (void)dy, (void)w, (void)n, (void)in, (void)out, (void)workspace, (void)accumulate;
#endif
}

void linear_backward_weight_amx(float* dw, float* db, const bf16* dy, const bf16* x, int n, int in, int out,
                                bf16* workspace, bool accumulate) {
  check_amx("linear_backward_weight_amx");
#if CRUMB_DPBF16
  const std::ptrdiff_t n32 = up(n, 32), in16 = up(in, 16), out16 = up(out, 16);
  auto* const dyp = reinterpret_cast<uint32_t*>(workspace);  // dy by pairs of samples [n32 / 2, out16]
  uint32_t* const dyt = dyp + n32 / 2 * out16;                  // its transpose: dy^T rows [out16, n32]
  uint32_t* const xb = dyt + out16 * n32 / 2;                   // x by pairs of samples [n32 / 2, in16]
  auto* const c = reinterpret_cast<float*>(xb + n32 / 2 * in16);
  pair_rows(reinterpret_cast<const uint16_t*>(dy), out, n, out, dyp);
  transpose(dyp, n32 / 2, out16, dyt);
  pair_rows(reinterpret_cast<const uint16_t*>(x), in, n, in, xb);
  gemm(c, reinterpret_cast<const uint16_t*>(dyt), xb, out16, in16, n32);
#pragma omp parallel for schedule(static) if (parallel(1.0 * out * in))
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) {
      float& d = dw[std::ptrdiff_t{o} * in + i];
      d = accumulate ? d + c[o * in16 + i] : c[o * in16 + i];
    }
  if (!db) return;
  // Each channel's sum over the samples in order, all channels a sample at a time (in c, now free).
  std::fill(c, c + out, 0.0f);
  for (int r = 0; r < n; ++r) {
    const bf16* row = dy + std::ptrdiff_t{r} * out;
#pragma omp simd
    for (int o = 0; o < out; ++o) c[o] += to_float(row[o]);
  }
  for (int o = 0; o < out; ++o) db[o] = accumulate ? db[o] + c[o] : c[o];
#else
  (void)dw, (void)db, (void)dy, (void)x, (void)n, (void)in, (void)out, (void)workspace, (void)accumulate;
#endif
}

template void linear_forward_amx<float>(bf16*, const bf16*, const bf16*, const float*, int, int, int, bf16*, bool);
template void linear_forward_amx<bf16>(bf16*, const bf16*, const bf16*, const bf16*, int, int, int, bf16*, bool);

}  // namespace crumb::cpu
