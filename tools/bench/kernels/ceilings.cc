#include "tools/bench/kernels/ceilings.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/ordered_gemm.h"

namespace crumb::bench {
namespace {

// Large enough that packing and threading overheads are noise and the GEMM runs at its best, small
// enough (7 GFLOP) to time in a fraction of a second on two cores.
constexpr int kGemmN = 1536;
// 3 arrays x 64 MiB: far beyond any last-level cache, so the triad streams from DRAM.
constexpr int64_t kStreamElements = int64_t(16) << 20;
// The quick figure (seconds == 0, smoke tests, sanitizer builds): 27x less GEMM work, and 3 x 16 MiB,
// still beyond this machine's 32 MiB L3 but not beyond every cache there is.
constexpr int kQuickGemmN = 512;
constexpr int64_t kQuickStreamElements = int64_t(4) << 20;

template <class F> double best_seconds(double budget, F&& run) {
  using Clock = std::chrono::steady_clock;
  if (budget > 0) run();  // warm-up: first-touch page faults, cold caches and thread start-up are not the ceiling
  double best = std::numeric_limits<double>::infinity();
  const auto start = Clock::now();
  do {
    const auto t0 = Clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  } while (std::chrono::duration<double>(Clock::now() - start).count() < budget);
  return best;
}

// Eigen's GEMM over per-thread column blocks, as the kernels that still use it call it (kernel_util.h's
// gemm and parallel_ranges).
double gemm_flops(int n, double seconds) {
  const std::size_t count = std::size_t(n) * n;
  std::vector<float> x(count, 0.5f), w(count, 0.25f), y(count);
  using Mat = Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  using CMat = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
  const double t = best_seconds(seconds, [&] {
    Mat Y(y.data(), n, n);
    const CMat X(x.data(), n, n), W(w.data(), n, n);
    cpu::detail::parallel_ranges(n, 1.0 * n * n * n, [&](Eigen::Index o0, Eigen::Index o1) {
      cpu::detail::gemm(Y.middleCols(o0, o1 - o0), X, W.middleRows(o0, o1 - o0).transpose(), false);
    });
  });
  return 2.0 * n * n * n / t;
}

// The direct convolutions' register tile (ordered_gemm, 8 x 48) on a problem each thread keeps in its
// own L2: what the fma units do when no packing or memory traffic gets in the way. Those kernels beat
// Eigen's large GEMM, so a ceiling from Eigen alone would put them above 100%.
double tile_flops(int m, int n, int k, double seconds) {
  const int threads = omp_get_max_threads();
  std::vector<float> lhs(std::size_t(m) * k, 0.5f), rhs(std::size_t(k) * n, 0.25f),
      dst(std::size_t(threads) * m * n);
  const double t = best_seconds(seconds, [&] {
#pragma omp parallel
    cpu::detail::ordered_gemm(dst.data() + std::size_t(omp_get_thread_num()) * m * n, n, lhs.data(), k, rhs.data(),
                              n, m, n, k, static_cast<const float*>(nullptr));
  });
  return 2.0 * m * n * k * threads / t;
}

// STREAM's triad a = b + s * c on all OpenMP threads; bytes counted as STREAM does (3 arrays, no
// write-allocate traffic).
double triad_bytes(int64_t n, double seconds) {
  std::vector<float> a(n), b(n), c(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {  // first touch by the threads that stream them later
    a[i] = 0;
    b[i] = 1;
    c[i] = 2;
  }
  const float s = 3;
  const double t = best_seconds(seconds, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
  });
  return 3.0 * sizeof(float) * n / t;
}

// A copy b = a on all OpenMP threads, two of the triad's arrays, bytes counted the same way (read plus
// write): the streaming pass with the least arithmetic, one read stream per written one, the fairest
// yardstick for the normalisation passes, which read one to three tensors per tensor they write.
double copy_bytes(int64_t n, double seconds) {
  std::vector<float> a(n), b(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    a[i] = 1;
    b[i] = 0;
  }
  const double t = best_seconds(seconds, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) b[i] = a[i];
  });
  return 2.0 * sizeof(float) * n / t;
}

// Independent chains of packet FMAs in registers, enough of them to cover the FMA latency on two units
// (4 cycles x 2 units = 8; 12 leaves room). No loads, no stores: the arithmetic peak, which a GEMM can
// approach but not pass.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
#endif
double fma_flops(double seconds, int* lanes) {
  using namespace Eigen::internal;
  using Packet = packet_traits<float>::type;
  constexpr int kChains = 12, L = unpacket_traits<Packet>::size;
  constexpr long kSteps = 1 << 20;
  *lanes = L;
  const int threads = omp_get_max_threads();
  std::vector<float> sink(std::size_t(threads) * L);
  const double t = best_seconds(seconds, [&] {
#pragma omp parallel
    {
      Packet acc[kChains];
      const Packet a = pset1<Packet>(0.999f), b = pset1<Packet>(1e-3f);
      for (int c = 0; c < kChains; ++c) acc[c] = pset1<Packet>(float(c));
      for (long i = 0; i < kSteps; ++i)
        for (int c = 0; c < kChains; ++c) acc[c] = pmadd(acc[c], a, b);
      Packet sum = acc[0];
      for (int c = 1; c < kChains; ++c) sum = padd(sum, acc[c]);
      pstoreu(sink.data() + std::size_t(omp_get_thread_num()) * L, sum);
    }
  });
  return 2.0 * L * kChains * kSteps * threads / t;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The first "cpu MHz" line of /proc/cpuinfo (0 if none): the clock the kernel last saw on one core.
double cpuinfo_mhz() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("cpu MHz", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) return std::strtod(line.c_str() + colon + 1, nullptr);
    }
  return 0;
}

}  // namespace

CpuCeilings measure_cpu_ceilings(double seconds) {
  const bool quick = seconds <= 0;
  const int n = quick ? kQuickGemmN : kGemmN;
  const int64_t elements = quick ? kQuickStreamElements : kStreamElements;
  // Per thread 64 x 768 x 256 (a 768 KiB right-hand side, in L2); quick: a third of the columns.
  const double eigen = gemm_flops(n, seconds), tile = tile_flops(64, quick ? 256 : 768, 256, seconds);
  int lanes = 0;
  const double fma = fma_flops(seconds, &lanes);
  const double copy = copy_bytes(elements, seconds);
  return {{std::max(eigen, tile), triad_bytes(elements, seconds), 0, copy}, n, elements, eigen, tile, fma, lanes,
          cpuinfo_mhz()};
}

}  // namespace crumb::bench
