// The CPU benchmarks: the engine's CPU rows, one per Case, named "cpu/<op>/<suite>/<layer>".
#pragma once
#include <vector>

#include "tools/bench/kernels/cases.h"
#include "tools/bench/kernels/report.h"

namespace crumb::bench {

void register_cpu(const std::vector<Case>& cases, const Peak& peak);

}  // namespace crumb::bench
