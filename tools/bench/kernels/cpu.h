// The CPU kernel benchmarks (kernels/cpu/kernels.h), one per Case, named "cpu/<kernel>/<suite>/<layer>".
#pragma once
#include <vector>

#include "tools/bench/kernels/cases.h"
#include "tools/bench/kernels/report.h"

namespace crumb::bench {

void register_cpu(const std::vector<Case>& cases, const Peak& peak);

}  // namespace crumb::bench
