// The counters every kernel benchmark reports, CPU and CUDA alike, so the JSON reads the same for both
// and tools/bench/kernels/plot.py needs to know one layout.
#pragma once
#include <string>

#include <benchmark/benchmark.h>

#include "tools/bench/kernels/cases.h"

namespace crumb::bench {

// The denominators of "% of peak": what the device can do at best, in operations and bytes per second.
struct Peak {
  double flops;  // FLOP/s of a GEMM-like kernel at its best
  double bytes;  // bytes/s of a streaming kernel at its best
  double fma = 0;  // FLOP/s of the FMA units alone (the CPU's; 0: not measured)
  double copy = 0;  // bytes/s of a plain copy (the CPU's; 0: not measured)
};

// The percentage of `peak` a benchmark reached, as a rate counter: a rate divides by the elapsed seconds,
// so work / ceiling per call becomes the percentage.
inline benchmark::Counter pct_of(const benchmark::State& state, const Case& c, const Peak& peak) {
  const double work = c.compute_bound ? c.flops : c.bytes, ceiling = c.compute_bound ? peak.flops : peak.bytes;
  return benchmark::Counter(100 * work * static_cast<double>(state.iterations()) / ceiling,
                            benchmark::Counter::kIsRate);
}

// Sets the rate counter ("GFLOP/s" or "TFLOP/s" for GEMM-like kernels, "GB/s" otherwise), "pct_peak"
// (that rate as a percentage of the matching Peak field), "pct_fma" (of the FMA units' peak, where
// measured), "pct_copy" (a streaming kernel's rate as a percentage of a plain copy's, where measured),
// "layers" and the shape as the label.
// flop_unit is 1e9 (GFLOP/s) or 1e12 (TFLOP/s). Rates are per second of the benchmark's own time, so
// they come out right whether it runs on real or manual time.
inline void report(benchmark::State& state, const Case& c, const Peak& peak, double flop_unit = 1e9) {
  using benchmark::Counter;
  const double calls = static_cast<double>(state.iterations());
  const bool gemm = c.compute_bound;
  const double work = gemm ? c.flops : c.bytes;
  const std::string unit = gemm ? (flop_unit == 1e12 ? "TFLOP/s" : "GFLOP/s") : "GB/s";
  state.counters[unit] = Counter(work * calls / (gemm ? flop_unit : 1e9), Counter::kIsRate);
  state.counters["pct_peak"] = pct_of(state, c, peak);
  if (gemm && peak.fma > 0)
    state.counters["pct_fma"] = Counter(100 * work * calls / peak.fma, Counter::kIsRate);
  if (!gemm && peak.copy > 0)
    state.counters["pct_copy"] = Counter(100 * work * calls / peak.copy, Counter::kIsRate);
  state.counters["layers"] = c.layers;
  state.SetLabel(c.label);
}

}  // namespace crumb::bench
