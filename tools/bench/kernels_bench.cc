// Microbenchmarks of the CPU kernels at the layer shapes of LeNet-5 and the small CNN, batch 64.
// Threads come from OMP_NUM_THREADS (the product target is measured at 2). Times are wall-clock,
// since the kernels run on several threads.
#include <omp.h>

#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/cpu/kernels.h"

namespace crumb::cpu {
namespace {

constexpr int kBatch = 64;

std::vector<float> filled(std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>((i * 7919 % 1000) / 1000.0 - 0.5);
  return v;
}

struct ConvLayer {
  const char* name;
  int c_in, hw, c_out, k, pad;
  Conv2dShape shape() const {
    const int out = hw + 2 * pad - k + 1;
    return {kBatch, c_in, hw, hw, c_out, k, k, 1, 1, pad, pad, out, out};
  }
};
struct LinearLayer {
  const char* name;
  int in, out;
};
struct PoolLayer {
  const char* name;
  int c, hw;
  Pool2dShape shape() const { return {kBatch, c, hw, hw, 2, 2, 2, 2, 0, 0, hw / 2, hw / 2}; }
};

const ConvLayer kConvs[] = {
    {"lenet_conv1", 1, 28, 6, 5, 2},
    {"lenet_conv2", 6, 14, 16, 5, 0},
    {"cnn_conv1", 1, 28, 32, 3, 1},
    {"cnn_conv2", 32, 14, 64, 3, 1},
};
const LinearLayer kLinears[] = {
    {"lenet_fc1", 400, 120}, {"lenet_fc2", 120, 84}, {"lenet_fc3", 84, 10},
    {"cnn_fc1", 3136, 128},  {"cnn_fc2", 128, 10},
};
const PoolLayer kPools[] = {
    {"lenet_pool1", 6, 28}, {"lenet_pool2", 16, 10}, {"cnn_pool1", 32, 28}, {"cnn_pool2", 64, 14}};

enum class Pass { kForward, kBackwardData, kBackwardWeight };

void set_flops(benchmark::State& state, double flops_per_call) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_call * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.counters["threads"] = omp_get_max_threads();
}

void conv(benchmark::State& state, const ConvLayer& layer, Pass pass) {
  const Conv2dShape s = layer.shape();
  const auto x = filled(s.in_count()), dy = filled(s.out_count());
  const auto w = filled(std::size_t(s.c_out) * s.c_in * s.kh * s.kw), b = filled(s.c_out);
  std::vector<float> y(s.out_count()), dx(s.in_count()), dw(w.size()), db(s.c_out);
  const std::size_t ws = pass == Pass::kForward        ? conv2d_forward_workspace(s)
                         : pass == Pass::kBackwardData ? conv2d_backward_data_workspace(s)
                                                       : conv2d_backward_weight_workspace(s);
  std::vector<float> workspace(ws);
  for (auto _ : state) {
    switch (pass) {
      case Pass::kForward: conv2d_forward(y.data(), x.data(), w.data(), b.data(), s, workspace.data()); break;
      case Pass::kBackwardData: conv2d_backward_data(dx.data(), dy.data(), w.data(), s, workspace.data(), false); break;
      case Pass::kBackwardWeight:
        conv2d_backward_weight(dw.data(), db.data(), dy.data(), x.data(), s, workspace.data(), false);
        break;
    }
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * s.out_count() * s.c_in * s.kh * s.kw);
}

void linear(benchmark::State& state, const LinearLayer& layer, Pass pass) {
  const int n = kBatch;
  const auto x = filled(std::size_t(n) * layer.in), w = filled(std::size_t(layer.out) * layer.in);
  const auto b = filled(layer.out), dy = filled(std::size_t(n) * layer.out);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
  for (auto _ : state) {
    switch (pass) {
      case Pass::kForward: linear_forward(y.data(), x.data(), w.data(), b.data(), n, layer.in, layer.out); break;
      case Pass::kBackwardData: linear_backward_data(dx.data(), dy.data(), w.data(), n, layer.in, layer.out, false); break;
      case Pass::kBackwardWeight:
        linear_backward_weight(dw.data(), db.data(), dy.data(), x.data(), n, layer.in, layer.out, false);
        break;
    }
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * n * layer.in * layer.out);
}

void max_pool(benchmark::State& state, const PoolLayer& layer, bool backward) {
  const Pool2dShape s = layer.shape();
  const std::size_t in = std::size_t(kBatch) * s.c * s.h * s.w, out = std::size_t(kBatch) * s.c * s.h_out * s.w_out;
  const auto x = filled(in), dy = filled(out);
  std::vector<float> y(out), dx(in);
  std::vector<uint8_t> argmax(out);
  max_pool2d_forward(y.data(), argmax.data(), x.data(), s);
  for (auto _ : state) {
    if (backward) {
      max_pool2d_backward(dx.data(), dy.data(), argmax.data(), s, false);
    } else {
      max_pool2d_forward(y.data(), argmax.data(), x.data(), s);
    }
    benchmark::ClobberMemory();
  }
}

template <class... Args> void add(const std::string& name, Args&&... args) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<Args>(args)...)->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void register_all() {
  const std::pair<Pass, const char*> passes[] = {
      {Pass::kForward, "fwd"}, {Pass::kBackwardData, "bwd_data"}, {Pass::kBackwardWeight, "bwd_weight"}};
  for (const ConvLayer& layer : kConvs) {
    for (auto [pass, name] : passes) {
      add(std::string("conv2d_") + name + "/" + layer.name, conv, layer, pass);
    }
  }
  for (const LinearLayer& layer : kLinears) {
    for (auto [pass, name] : passes) {
      add(std::string("linear_") + name + "/" + layer.name, linear, layer, pass);
    }
  }
  for (const PoolLayer& layer : kPools) {
    add(std::string("max_pool_fwd/") + layer.name, max_pool, layer, false);
    add(std::string("max_pool_bwd/") + layer.name, max_pool, layer, true);
  }
}

}  // namespace
}  // namespace crumb::cpu

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  crumb::cpu::register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
