// The bf16 weight gradient of stride-1 convolutions on AMX tiles. Per tap t at flat shift
// ki * W + kj of the padded width W, dw[co][ci][t] is the dot product of input row ci of the padded
// planes, from the shift on, with dy's row co at the same flat positions (oh * W + ow, zero where
// ow >= w_out): a GEMM over positions, C[ci][co] += A[ci][q] B[q][co]. A tile is 16 input rows by 32
// positions read straight from the padded planes at any shift; B is dy transposed into pairs of
// positions by output channel (TDPBF16PS's pair layout), built once per sample and shared by every tap.
// The float32 sums of each (tap, 16 input, 16 output channels) tile go sample after sample, 32
// positions a step, so every sum is one fixed sequence whatever the thread count or how many samples
// a pass holds (lean passes hold one). The positions past each row's end multiply x's neighbouring
// values by dy's zeros: nothing for finite x, but an infinite x there makes NaN where the float32 kernel,
// which never reads it for that tap, stays finite. Such an x is read by other taps' outputs anyway, so
// the step's outputs and loss are not finite either.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/base/error.h"
#include "kernels/conv2d.h"
#include "kernels/cpu/amx.h"
#include "kernels/cpu/conv2d_phases.h"
#include "kernels/cpu/kernel_util.h"

namespace crumb::cpu {
namespace {

// dy's rows are laid out flat, 16 at a time, in one slot per building thread.
constexpr int kSlots = 8;
// Samples per pass: enough positions that each tile's sums stay in tiles for a while.
constexpr std::ptrdiff_t kPassPositions = 2048;

struct Geom {
  int taps, c_in_g, c_out_g;
  std::ptrdiff_t w;       // padded width W
  std::ptrdiff_t k;       // flat positions of a sample: h_out * W rounded up to 32
  std::ptrdiff_t lp;      // entries per input row of a sample: its padded plane and the farthest tap's reach
  std::ptrdiff_t ci, co;  // channels per group, padded to 16
  int per_pass;
  explicit Geom(const Conv2dShape& s)
      : taps(s.kh * s.kw),
        c_in_g(s.c_in / s.groups),
        c_out_g(s.c_out / s.groups),
        w(s.w + 2 * s.pad_w),
        k((s.h_out * w + 31) / 32 * 32),
        lp((k + (s.kh - 1) * w + s.kw - 1 + 31) / 32 * 32),
        ci((c_in_g + 15) / 16 * 16),
        co((c_out_g + 15) / 16 * 16),
        per_pass(s.lean ? 1 : static_cast<int>(std::clamp<std::ptrdiff_t>((kPassPositions + k - 1) / k, 1, s.n))) {}
  // In bf16 elements: the pass's padded planes [sample][ci][lp], dy transposed [sample][k / 2][co] pairs,
  // the slots [16][k], the sums [tap][ci][co] in float32.
  std::ptrdiff_t planes_len() const { return per_pass * ci * lp; }
  std::ptrdiff_t dyt_len() const { return per_pass * k * co; }
  std::ptrdiff_t slots_len() const { return kSlots * 16 * k; }
  std::ptrdiff_t sums_len() const { return 2 * taps * ci * co; }
};

#if CRUMB_DPBF16
// Input row c of a sample into its padded plane (zeros around it, and for the padding channels).
void plane_row(const Conv2dShape& s, const Geom& g, const uint16_t* x_c, bool real, uint16_t* row) {
  std::memset(row, 0, sizeof(uint16_t) * g.lp);
  if (!real) return;
  for (int ih = 0; ih < s.h; ++ih)
    std::memcpy(row + (ih + s.pad_h) * g.w + s.pad_w, x_c + std::ptrdiff_t{ih} * s.w, sizeof(uint16_t) * s.w);
}

// Output rows [co, co + 16) of a sample's dy laid out flat in slot, then transposed into pairs of positions
// by channel: dyt[p][co + r] = (flat[r][2 p], flat[r][2 p + 1]).
void transposed_rows(const Conv2dShape& s, const Geom& g, const uint16_t* dy_g, int co, uint16_t* slot, uint32_t* dyt) {
  std::memset(slot, 0, sizeof(uint16_t) * 16 * g.k);
  for (int r = 0; r < 16 && co + r < g.c_out_g; ++r)
    for (int oh = 0; oh < s.h_out; ++oh)
      std::memcpy(slot + r * g.k + oh * g.w, dy_g + (std::ptrdiff_t{co + r} * s.h_out + oh) * s.w_out,
                  sizeof(uint16_t) * s.w_out);
  const auto* flat = reinterpret_cast<const uint32_t*>(slot);
  for (std::ptrdiff_t p = 0; p < g.k / 2; p += 16) detail::transpose16x16(flat + p, g.k / 2, dyt + p * g.co + co, g.co);
}

// The sums of input rows [ci0, ci0 + 16 M) by output channels [co0, co0 + 16 N) at one tap (planes from
// the tap's shift on) over a pass's samples: C tiles 0-3 ((m, n) at 2 m + n), A 4-5, B 6-7.
template <int M, int N>
CRUMB_TARGET_AMX void weight_block(float* sums, std::ptrdiff_t ld, bool first, const uint16_t* planes,
                                   const uint32_t* dyt, const Geom& g, int count) {
  const long c_stride = static_cast<long>(ld * 4);
  if (first) {
    detail::tiles_zero<M, N>();
  } else {
    detail::tiles_load<M, N>(sums, c_stride);
  }
  for (int j = 0; j < count; ++j) {
    const uint16_t* a = planes + j * g.ci * g.lp;
    const uint32_t* b = dyt + j * (g.k / 2) * g.co;
    for (std::ptrdiff_t q = 0; q < g.k; q += 32)
      detail::tiles_step<M, N>(a + q, static_cast<long>(g.lp * 2), b + q / 2 * g.co, static_cast<long>(g.co * 4));
  }
  detail::tiles_store<M, N>(sums, c_stride);
}

using BlockFn = void (*)(float*, std::ptrdiff_t, bool, const uint16_t*, const uint32_t*, const Geom&, int);
constexpr BlockFn kBlocks[2][2] = {{weight_block<1, 1>, weight_block<1, 2>}, {weight_block<2, 1>, weight_block<2, 2>}};
#endif

int threads_for(double macs, int items) {
  return macs < detail::kParallelMacs ? 1 : std::max(1, std::min(items, omp_get_max_threads()));
}

}  // namespace

bool conv2d_backward_weight_amx_applies(const Conv2dShape& s) {
  return (uses_amx() && s.stride_h == 1 && s.stride_w == 1 && amx_tiles_fit(s)) || detail::runs_phased(s);
}

std::size_t conv2d_backward_weight_amx_workspace(const Conv2dShape& s) {
  if (detail::runs_phased(s)) return detail::phased_weight_workspace(s);
  const Geom g(s);
  return static_cast<std::size_t>(g.planes_len() + g.dyt_len() + g.slots_len() + g.sums_len());
}

void conv2d_backward_weight_amx(float* dw, float* db, const bf16* dy, const bf16* x, const Conv2dShape& s,
                                bf16* workspace, bool accumulate) {
#if CRUMB_DPBF16
  CRUMB_CHECK(conv2d_backward_weight_amx_applies(s),
              "conv2d_backward_weight_amx: needs AMX, stride 1 or 2 and 16 channels a group (check the _applies rule)");
  if (detail::runs_phased(s)) return detail::phased_weight(dw, db, dy, x, s, workspace, accumulate);
  const Geom g(s);
  auto* const planes = reinterpret_cast<uint16_t*>(workspace);
  auto* const dyt = reinterpret_cast<uint32_t*>(planes + g.planes_len());
  uint16_t* const slots = planes + g.planes_len() + g.dyt_len();
  auto* const sums = reinterpret_cast<float*>(slots + g.slots_len());
  auto* const xs = reinterpret_cast<const uint16_t*>(x);
  auto* const dys = reinterpret_cast<const uint16_t*>(dy);
  const std::ptrdiff_t x_len = std::ptrdiff_t{s.c_in} * s.h * s.w, y_len = std::ptrdiff_t{s.c_out} * s.h_out * s.w_out;
  const std::ptrdiff_t ci_blocks = g.ci / 16, co_blocks = g.co / 16, ci_pairs = (ci_blocks + 1) / 2;
  const double pass_macs = 1.0 * g.per_pass * g.k * g.ci * g.co * g.taps;
  for (int grp = 0; grp < s.groups; ++grp) {
    for (int i0 = 0; i0 < s.n; i0 += g.per_pass) {
      const int count = std::min(g.per_pass, s.n - i0);
      // The pass's planes and transposed dy, one row (or 16 of dy) an item.
      const std::ptrdiff_t plane_items = count * g.ci, items = plane_items + count * co_blocks;
#pragma omp parallel for schedule(static) num_threads(std::min(kSlots, threads_for(pass_macs, kSlots))) \
    if (pass_macs >= detail::kParallelMacs)
      for (std::ptrdiff_t it = 0; it < items; ++it) {
        if (it < plane_items) {
          const std::ptrdiff_t j = it / g.ci, c = it % g.ci;
          plane_row(s, g, xs + (i0 + j) * x_len + (std::ptrdiff_t{grp} * g.c_in_g + c) * s.h * s.w, c < g.c_in_g,
                    planes + (j * g.ci + c) * g.lp);
        } else {
          const std::ptrdiff_t j = (it - plane_items) / co_blocks, b = (it - plane_items) % co_blocks;
          transposed_rows(s, g, dys + (i0 + j) * y_len + std::ptrdiff_t{grp} * g.c_out_g * s.h_out * s.w_out,
                          static_cast<int>(16 * b), slots + omp_get_thread_num() * 16 * g.k,
                          dyt + j * (g.k / 2) * g.co);
        }
      }
      // Each (tap, pair of input blocks) item owns its tiles' sums over every pass.
      const std::ptrdiff_t blocks = g.taps * ci_pairs;
#pragma omp parallel num_threads(threads_for(pass_macs, static_cast<int>(blocks))) \
    if (pass_macs >= detail::kParallelMacs)
      {
        detail::configure_square_tiles();
#pragma omp for schedule(static)
        for (std::ptrdiff_t it = 0; it < blocks; ++it) {
          const int t = static_cast<int>(it / ci_pairs);
          const std::ptrdiff_t cb = 2 * (it % ci_pairs), shift = (t / s.kw) * g.w + t % s.kw;
          const int m = ci_blocks - cb >= 2 ? 2 : 1;
          for (std::ptrdiff_t ob = 0; ob < co_blocks; ob += 2) {
            const int n = co_blocks - ob >= 2 ? 2 : 1;
            kBlocks[m - 1][n - 1](sums + (t * g.ci + 16 * cb) * g.co + 16 * ob, g.co, i0 == 0,
                                  planes + 16 * cb * g.lp + shift, dyt + 16 * ob, g, count);
          }
        }
        detail::release_tiles();
      }
    }
    // dw[co][ci][t] out of the sums [t][ci][co].
    float* dw_g = dw + std::ptrdiff_t{grp} * g.c_out_g * g.c_in_g * g.taps;
#pragma omp parallel for schedule(static) if (pass_macs >= detail::kParallelMacs)
    for (int co = 0; co < g.c_out_g; ++co)
      for (int ci = 0; ci < g.c_in_g; ++ci)
        for (int t = 0; t < g.taps; ++t) {
          float& d = dw_g[(std::ptrdiff_t{co} * g.c_in_g + ci) * g.taps + t];
          const float v = sums[(t * g.ci + ci) * g.co + co];
          d = accumulate ? d + v : v;
        }
  }
  if (db) detail::bias_gradient(db, dy, s, accumulate);
#else
  (void)dw, (void)db, (void)dy, (void)x, (void)s, (void)workspace, (void)accumulate;
  CRUMB_FAIL("conv2d_backward_weight_amx: this build has no AMX kernels (check conv2d_backward_weight_amx_applies)");
#endif
}

}  // namespace crumb::cpu
