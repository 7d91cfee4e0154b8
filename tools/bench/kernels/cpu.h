// The CPU benchmarks: the engine's CPU rows, one per Case, named "cpu/<op>/<suite>/<layer>"; cold: each
// call after the caches were flushed (untimed), not on the operands the previous call left there.
#pragma once
#include <vector>

#include "tools/bench/kernels/cases.h"
#include "tools/bench/kernels/report.h"

namespace crumb::bench {

void register_cpu(const std::vector<Case>& cases, const Peak& peak, bool cold);

}  // namespace crumb::bench
