#include "tools/bench/kernels/cpu.h"

#include "engine/device/backend.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/conv2d_algo.h"

namespace crumb::bench {
namespace {

void run(benchmark::State& state, const Case& c, const Peak& peak) {
  EngineCall call(c, backend(Device::CPU));
  for (auto _ : state) {
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

void register_cpu(const std::vector<Case>& cases, const Peak& peak) {
  for (const Case& c : cases) {
    // Wall-clock time: the kernels run on several OpenMP threads, whose CPU time would add up.
    benchmark::RegisterBenchmark(("cpu/" + c.name()).c_str(), run, c, peak)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace crumb::bench
