#include "tools/bench/kernels/cpu.h"

#include <vector>

#include "engine/device/backend.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/conv2d_algo.h"

namespace crumb::bench {
namespace {

// Read, untimed, before each call of a cold run: twice this machine's 32 MiB L3, so the call finds its
// operands in DRAM, as a training step mostly does (the benchmark's repeated calls otherwise keep whatever
// fits in the caches there, and favour ops that touch fewer tensors). Clean lines, so that evicting them
// costs the timed call no write-backs.
constexpr std::size_t kEvictFloats = std::size_t(16) << 20;

// One value of each cache line, into independent sums (one running sum would wait out each add).
float evict_caches() {
  static const std::vector<float> big(kEvictFloats, 1.0f);
  constexpr std::size_t kLine = 64 / sizeof(float);
  float s[8] = {};
  for (std::size_t i = 0; i < big.size(); i += 8 * kLine)
    for (int k = 0; k < 8; ++k) s[k] += big[i + k * kLine];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

void run(benchmark::State& state, const Case& c, const Peak& peak, bool cold) {
  EngineCall call(c, backend(Device::CPU));
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      benchmark::DoNotOptimize(evict_caches());
      state.ResumeTiming();
    }
    call.run();
    benchmark::ClobberMemory();
  }
  report(state, c, peak);
  if (c.graph) {
    const Node& n = c.graph->node(c.node);
    if (n.def == &kConv2d || n.def == &kConv2dBwdData)
      state.counters["winograd"] = conv_runs_winograd(*c.graph, ops::geometry<cpu::Conv2dShape>(n),
                                                      n.def == &kConv2d ? ConvAlgoPass::Forward : ConvAlgoPass::Data);
  }
  if (c.compute_bound) state.counters["workspace_bytes"] = static_cast<double>(call.workspace_bytes());
}

}  // namespace

void register_cpu(const std::vector<Case>& cases, const Peak& peak, bool cold) {
  for (const Case& c : cases) {
    // Wall-clock time: the kernels run on several OpenMP threads, whose CPU time would add up.
    benchmark::RegisterBenchmark(("cpu/" + c.name()).c_str(), run, c, peak, cold)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace crumb::bench
