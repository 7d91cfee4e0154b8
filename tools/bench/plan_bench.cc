// How long planning takes on a deep graph: a ResNet-like stack of residual blocks (conv-relu-conv-add-
// relu, 16 channels at 32x32), sized to ~500 forward+backward nodes by default, as ResNet-50 will be.
// Prints the node and block counts, the time of one training-pass plan, of compiling both passes for
// one micro-batch size (what the executor and each budget-search candidate do), and of the whole
// budget search, with the arena/lower-bound ratio.
//
// usage: plan_bench [blocks=40] [micro_batch=64] [batch=4096] [budget_mib=512]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "engine/graph/autograd.h"
#include "engine/plan/compile.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/strategy/memory_report.h"

using namespace crumb;

namespace {

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Graph residual_stack(int blocks) {
  Graph g;
  const ValueId x = g.input("x", {3, 32, 32});
  const ValueId y = g.input("y", {}, DType::I32);
  ValueId h = nn::relu(g, nn::conv2d(g, x, 16, 3, "stem", nn::ConvOptions().with_pad(1)), "stem.relu");
  for (int b = 0; b < blocks; ++b) {
    const std::string name = "block" + std::to_string(b);
    ValueId r = nn::relu(g, nn::conv2d(g, h, 16, 3, name + ".conv1", nn::ConvOptions().with_pad(1)), name + ".relu1");
    r = nn::conv2d(g, r, 16, 3, name + ".conv2", nn::ConvOptions().with_pad(1));
    h = nn::relu(g, nn::add(g, h, r, name + ".add"), name + ".relu2");
  }
  h = nn::linear(g, nn::flatten(g, nn::global_avg_pool(g, h, "pool"), "flat"), 10, "fc");
  nn::softmax_cross_entropy(g, h, y, "loss");
  build_backward(g);
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  const int blocks = argc > 1 ? std::atoi(argv[1]) : 40;
  const int m = argc > 2 ? std::atoi(argv[2]) : 64;
  const int batch = argc > 3 ? std::atoi(argv[3]) : 4096;
  const std::size_t budget = (argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 512) << 20;
  try {
    const Graph g = residual_stack(blocks);
    OptimizerConfig sgd;
    sgd.momentum = 0.9;
    CompiledPass train;
    const double compile_s = seconds_of([&] { train = compile_pass(g, Pass::Train, m, Device::CPU); });
    std::vector<std::size_t> workspace;
    for (const CompiledStep& s : train.steps) workspace.push_back(s.workspace);
    const double plan_s =
        seconds_of([&] { (void)plan_memory(g, train.plan.order, m, {g.loss()}, workspace); });
    int chosen = 0;
    const double search_s =
        seconds_of([&] { chosen = choose_micro_batch(g, batch, budget, sgd, Device::CPU).micro_batch; });
    std::printf("graph: %d blocks, %d nodes (%zu steps in the training pass), %d values\n", blocks, g.num_nodes(),
                train.plan.order.size(), g.num_values());
    std::printf("plan of the training pass at m=%d: %.1f ms (arena %s, lower bound %s, ratio %.3f)\n", m,
                plan_s * 1e3, format_bytes(train.plan.arena_bytes).c_str(),
                format_bytes(train.plan.lower_bound).c_str(), train.plan.ratio());
    std::printf("compile_pass (implementations + plan) at m=%d: %.1f ms\n", m, compile_s * 1e3);
    std::printf("budget search, batch %d in %s: m=%d in %.1f ms\n", batch, format_bytes(budget).c_str(), chosen,
                search_s * 1e3);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plan_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
