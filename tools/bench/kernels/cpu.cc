#include "tools/bench/kernels/cpu.h"

#include "engine/device/backend.h"

namespace crumb::bench {
namespace {

void run(benchmark::State& state, const Case& c, const Peak& peak) {
  EngineCall call(c, backend(Device::CPU));
  for (auto _ : state) {
    call.run();
    benchmark::ClobberMemory();
  }
  report(state, c, peak);
  if (c.compute_bound) state.counters["workspace_bytes"] = static_cast<double>(call.workspace_bytes());
}

}  // namespace

void register_cpu(const std::vector<Case>& cases, const Peak& peak) {
  for (const Case& c : cases) {
    // Wall-clock time: the kernels run on several OpenMP threads, whose CPU time would add up.
    benchmark::RegisterBenchmark(("cpu/" + c.name()).c_str(), run, c, peak)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace crumb::bench
