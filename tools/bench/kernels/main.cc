// Kernel microbenchmarks: the engine's own op rows, every node of a training step at the layer shapes of
// the reference models and of DeepBench, and the optimizer's passes, on the CPU and (in a CUDA build with
// a device) the GPU. Google Benchmark's own flags apply (--benchmark_filter, --benchmark_out=FILE
// --benchmark_out_format=json, ...); ours:
//   --suites=a,b,...      run only these suites (default: all; see cases.cc)
//   --device=cpu|cuda|all which kernels to run (default all)
//   --ceiling_seconds=S   time spent measuring each CPU ceiling (default 1; 0 = one quick rough run each)
//   --conv-algo=measure|direct|winograd  the CPU's stride-1 3x3 convolutions (Graph::conv_algo; default
//                         direct); each such CPU benchmark reports "winograd" 1 or 0, what it ran
//   --cold                CPU: flush the caches (untimed) before every call, so that each finds its
//                         operands in DRAM as a training step's kernels mostly do
// Threads come from OMP_NUM_THREADS.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "engine/base/error.h"
#include "tools/bench/kernels/cases.h"
#include "tools/bench/kernels/ceilings.h"
#include "tools/bench/kernels/cpu.h"
#if CRUMB_HAVE_CUDA
#include "tools/bench/kernels/cuda.h"
#endif

namespace crumb::bench {
namespace {

struct Options {
  std::vector<std::string> suites;  // empty: all
  bool cpu = true, cuda = true;
  double ceiling_seconds = 1.0;
  Graph::ConvAlgo conv_algo = Graph::ConvAlgo::Direct;
  bool cold = false;
};

const char kUsage[] = "usage: kernels_bench [--suites=a,b] [--device=cpu|cuda|all] [--ceiling_seconds=S] "
                      "[--conv-algo=measure|direct|winograd] [--cold] [Google Benchmark flags]";

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string known_suites() {
  std::string known;
  for (const Suite& s : suites()) known += (known.empty() ? "" : ", ") + s.name;
  return known;
}

// Google Benchmark has taken its own flags out of argv already: what is left must be ours.
Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&](const char* flag) -> const char* {
      const std::string prefix = std::string(flag) + "=";
      return arg.compare(0, prefix.size(), prefix) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (arg == "--cold") {
      o.cold = true;
    } else if (const char* v = value("--suites")) {
      o.suites = split(v);
      for (const std::string& name : o.suites) {
        bool found = false;
        for (const Suite& s : suites()) found = found || s.name == name;
        CRUMB_CHECK(found, "unknown suite '", name, "' (known: ", known_suites(), ")");
      }
    } else if (const char* v = value("--device")) {
      const std::string d = v;
      CRUMB_CHECK(d == "cpu" || d == "cuda" || d == "all", "--device must be cpu, cuda or all, got '", d, "'");
      o.cpu = d != "cuda";
      o.cuda = d != "cpu";
    } else if (const char* v = value("--ceiling_seconds")) {
      char* end = nullptr;
      o.ceiling_seconds = std::strtod(v, &end);
      CRUMB_CHECK(*v != '\0' && *end == '\0' && o.ceiling_seconds >= 0,
                  "--ceiling_seconds needs a number of seconds >= 0, got '", v, "'");
    } else if (const char* v = value("--conv-algo")) {
      const std::string a = v;
      CRUMB_CHECK(a == "measure" || a == "direct" || a == "winograd",
                  "--conv-algo must be measure, direct or winograd, got '", a, "'");
      o.conv_algo = a == "direct" ? Graph::ConvAlgo::Direct
                    : a == "winograd" ? Graph::ConvAlgo::Winograd : Graph::ConvAlgo::Measure;
    } else {
      CRUMB_FAIL("unknown argument '", arg, "'\n", kUsage);
    }
  }
  return o;
}

bool selected(const Options& o, const Suite& s) {
  if (o.suites.empty()) return true;
  for (const std::string& name : o.suites)
    if (name == s.name) return true;
  return false;
}

int run(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const Options o = parse(argc, argv);
  std::vector<Case> all;
  for (const Suite& s : suites()) {
    if (!selected(o, s)) continue;
    for (Case& c : cases(s)) all.push_back(std::move(c));
  }
  // Each graph once with the algorithm asked for (the cases of one graph share it).
  std::map<const Graph*, std::shared_ptr<const Graph>> with_algo;
  for (Case& c : all) {
    if (!c.graph || o.conv_algo == c.graph->conv_algo()) continue;
    auto& g = with_algo[c.graph.get()];
    if (!g) {
      auto copy = std::make_shared<Graph>(*c.graph);
      copy->set_conv_algo(o.conv_algo);
      g = copy;
    }
    c.graph = g;
  }
  if (o.cpu) {
    const CpuCeilings ceilings = measure_cpu_ceilings(o.ceiling_seconds);
    benchmark::AddCustomContext("cpu_threads", std::to_string(omp_get_max_threads()));
    benchmark::AddCustomContext("cpu_peak_GFLOP/s", std::to_string(ceilings.peak.flops / 1e9));
    benchmark::AddCustomContext("cpu_peak_GB/s", std::to_string(ceilings.peak.bytes / 1e9));
    benchmark::AddCustomContext("cpu_peak_source", "GEMM: the better of a " + std::to_string(ceilings.gemm_n) +
                                "^3 sgemm through Eigen (detail::gemm in per-thread column blocks) and ordered_gemm's 8x48 register "
                                "tile on an L2-resident 64x768x256 per thread; bandwidth: best STREAM triad "
                                "over 3 x " + std::to_string(ceilings.stream_elements) + " floats");
    benchmark::AddCustomContext("cpu_copy_GB/s", std::to_string(ceilings.peak.copy / 1e9));
    benchmark::AddCustomContext("cpu_cold", o.cold ? "1" : "0");
    benchmark::AddCustomContext("cpu_gemm_eigen_GFLOP/s", std::to_string(ceilings.eigen_flops / 1e9));
    benchmark::AddCustomContext("cpu_gemm_tile_GFLOP/s", std::to_string(ceilings.tile_flops / 1e9));
    benchmark::AddCustomContext("cpu_fma_peak_GFLOP/s", std::to_string(ceilings.fma_flops / 1e9));
    benchmark::AddCustomContext("cpu_fma_lanes", std::to_string(ceilings.fma_lanes));
    benchmark::AddCustomContext("cpu_cpuinfo_MHz", std::to_string(ceilings.cpuinfo_mhz));
    // What the FMA figure means in units: lanes x 2 flops x threads x GHz per unit; 2 units are usual.
    const double per_unit_ghz = ceilings.fma_flops / (2.0 * ceilings.fma_lanes * omp_get_max_threads()) / 1e9;
    std::fprintf(stderr, "CPU ceilings (%d threads): GEMM %.1f GFLOP/s (Eigen %.1f, register tile %.1f), triad %.1f GB/s, copy %.1f GB/s\n"
                 "FMA peak %.1f GFLOP/s (%d-lane vectors: %.2f GHz x units; /proc/cpuinfo says %.0f MHz): "
                 "the GEMM ceiling is %.0f%% of it\n",
                 omp_get_max_threads(), ceilings.peak.flops / 1e9, ceilings.eigen_flops / 1e9,
                 ceilings.tile_flops / 1e9, ceilings.peak.bytes / 1e9, ceilings.peak.copy / 1e9, ceilings.fma_flops / 1e9, ceilings.fma_lanes,
                 per_unit_ghz, ceilings.cpuinfo_mhz, 100 * ceilings.peak.flops / ceilings.fma_flops);
    Peak peak = ceilings.peak;
    peak.fma = ceilings.fma_flops;
    register_cpu(all, peak, o.cold);
  }
  if (o.cuda) {
#if CRUMB_HAVE_CUDA
    register_cuda(all);
#else
    std::fprintf(stderr, "cuda: skipped (built without CUDA)\n");
#endif
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace
}  // namespace crumb::bench

int main(int argc, char** argv) {
  try {
    return crumb::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernels_bench: %s\n", e.what());
    return 2;
  }
}
