// How the CPU optimizers walk the flat parameter block: in runs of a few thousand parameters, in
// parallel for large blocks, each run's update followed by the write of its parameters' 16-bit copies
// (StepExtras) while the run is in cache. The copies go through convert16.h's SIMD runs: written element
// by element inside the update loop, their rounding kept that loop from vectorising, and the copies
// cost bf16 training more than the update itself.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/convert16.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/step_extras.h"

namespace crumb::cpu::detail {

// Calls update(begin, end) over [0, count) in runs, then writes copies of params[begin, end) if x asks
// (float parameters only: float64 ones have no copies) and counts the run's non-finite parameters if x
// asks, while the run is in cache: a second pass over the block read it all again from L2 or memory.
template <class T, class F> void update_in_runs(T* params, std::size_t count, const StepExtras& x, F&& update) {
  constexpr std::ptrdiff_t kRun = 4096;
  const auto end = static_cast<std::ptrdiff_t>(count);
  const std::ptrdiff_t runs = (end + kRun - 1) / kRun;
  std::uint64_t bad = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad) if (end > kParallelGrain)
  for (std::ptrdiff_t r = 0; r < runs; ++r) {
    const std::ptrdiff_t begin = r * kRun, stop = std::min(end, begin + kRun);
    update(begin, stop);
    if (x.nonfinite) {
#pragma omp simd reduction(+ : bad)
      for (std::ptrdiff_t i = begin; i < stop; ++i) bad += !std::isfinite(params[i]);
    }
    const auto n = static_cast<std::size_t>(stop - begin);
    if constexpr (std::is_same_v<T, float>) {
      if (!x.copy) continue;
      if (x.copy_dtype == DType::F16) {
        from_float_run(static_cast<f16*>(x.copy) + begin, params + begin, n);
      } else {
        from_float_run(static_cast<bf16*>(x.copy) + begin, params + begin, n);
      }
    }
  }
  if (x.nonfinite) *x.nonfinite = bad;
}

}  // namespace crumb::cpu::detail
