// This machine's measured CPU ceilings, the denominators of the CPU benchmarks' "% of peak": the best
// GEMM rate through the kernels' own GEMM paths (Eigen's large GEMM, the direct convolutions' register
// tile) and the best streaming bandwidth, measured by the same binary in the same run (so load, clocks
// and thread count are those the kernels see).
#pragma once
#include <cstdint>

#include "tools/bench/kernels/report.h"

namespace crumb::bench {

struct CpuCeilings {
  Peak peak;  // peak.copy: a plain copy b = a over two arrays of stream_elements
  int gemm_n;              // the square GEMM's size
  int64_t stream_elements; // elements of each of the triad's three arrays
  double eigen_flops;      // the two GEMM figures; peak.flops is the better
  double tile_flops;
  // The FMA units' own peak: independent register FMAs on every thread, no loads (so units x lanes x 2 x
  // the clock they run at now x threads), in the build's widest vectors; and those vectors' lanes and
  // the clock /proc/cpuinfo reports (MHz; 0 where it reports none), to read the figure against.
  double fma_flops;
  int fma_lanes;
  double cpuinfo_mhz;
};

// Each ceiling is the best of repeated runs for at least `seconds` after a warm-up run; 0: one run of
// smaller problems, no warm-up (a smoke test's rough figure, not a ceiling to judge kernels by).
CpuCeilings measure_cpu_ceilings(double seconds);

}  // namespace crumb::bench
