// Persistent, non-trained state (ValueKind::State: BatchNorm's running statistics and counters): it lives
// in the parameter store, the optimizer never touches it, checkpoints save and validate it, executors
// point at it, and the memory report counts it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/io/checkpoint.h"
#include "engine/base/error.h"
#include "engine/run/executor.h"
#include "engine/ops/linear.h"
#include "engine/ops/softmax_xent.h"
#include "engine/strategy/memory_report.h"
#include "engine/optim/optimizer.h"
#include "tests/optimizer_configs.h"

namespace crumb {
namespace {

// A linear classifier with BatchNorm-like state beside it; `counter` is the I64 counter's dtype.
Graph graph_with_state(bool with_state = true, DType counter = DType::I64) {
  Graph g;
  const ValueId x = g.input("x", {6});
  const ValueId y = g.input("y", {}, DType::I32);
  nn::softmax_cross_entropy(g, nn::linear(g, x, 3, "fc"), y, "loss");
  if (with_state) {
    g.state("bn.running_mean", {6}, 0.0);
    g.state("bn.running_var", {6}, 1.0);
    g.state("bn.num_batches_tracked", {}, 0.0, counter);
  }
  build_backward(g);
  return g;
}

std::vector<char> state_bytes(const ParamStore& p) {
  std::vector<char> out;
  for (ValueId v : p.graph().states()) {
    const char* s = static_cast<const char*>(p.state(v));
    out.insert(out.end(), s, s + p.graph().value(v).count(1) * dtype_size(p.graph().value(v).dtype));
  }
  return out;
}

TEST(State, StartsAtItsFillAndTheOptimizerNeverTouchesIt) {
  const Graph g = graph_with_state();
  for (const OptimizerConfig& cfg : {sgd_config(0.1, 0.9, 0.01), adamw_config(1e-2, 0.01)}) {
    ParamStore params(g);
    params.init(3);
    const ValueId mean = g.find_value("bn.running_mean"), var = g.find_value("bn.running_var"),
                  count = g.find_value("bn.num_batches_tracked");
    EXPECT_EQ(static_cast<float*>(params.state(mean))[5], 0.0f);
    EXPECT_EQ(static_cast<float*>(params.state(var))[0], 1.0f);
    EXPECT_EQ(*static_cast<int64_t*>(params.state(count)), 0);
    static_cast<float*>(params.state(mean))[2] = 0.25f;
    const std::vector<char> before = state_bytes(params);
    const std::unique_ptr<Optimizer> opt = make_optimizer(params, cfg);
    float* grads = static_cast<float*>(params.grad_block());
    for (std::size_t i = 0; i < params.count(); ++i) grads[i] = 0.5f;
    const float w0 = static_cast<float*>(params.data(g.find_value("fc.weight")))[0];
    opt->step();
    EXPECT_NE(static_cast<float*>(params.data(g.find_value("fc.weight")))[0], w0);  // trained
    EXPECT_EQ(state_bytes(params), before);                                           // not trained
  }
}

TEST(State, ExecutorsPointAtTheStoreAndTheReportCountsIt) {
  const Graph g = graph_with_state();
  ParamStore params(g);
  Arena arena;
  Executor e(g, params, arena, 4, Pass::Eval);
  for (ValueId v : g.states()) EXPECT_EQ(e.data(v), params.device_state(v)) << g.value(v).name;
  const MemoryBreakdown mb = measure_memory(g, 4, sgd_config(0.1, 0, 0));
  EXPECT_EQ(mb.state, params.state_bytes());
  EXPECT_EQ(mb.state, 3u * 64);  // each value 64-byte aligned
  EXPECT_EQ(measure_memory(graph_with_state(false), 4, sgd_config(0.1, 0, 0)).state, 0u);
}

class StateCheckpoint : public ::testing::Test {
 protected:
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_ = ::testing::TempDir() + "crumb_state_" + std::to_string(::getpid()) + ".safetensors";
};

TEST_F(StateCheckpoint, RoundTripsWithItsDtypes) {
  const Graph g = graph_with_state();
  ParamStore saved(g);
  saved.init(1);
  static_cast<float*>(saved.state(g.find_value("bn.running_var")))[4] = 3.5f;
  *static_cast<int64_t*>(saved.state(g.find_value("bn.num_batches_tracked"))) = (int64_t{1} << 40) + 7;
  save_checkpoint(path_, saved, nullptr, "test");
  ParamStore loaded(g);
  loaded.init(2);
  load_checkpoint(path_, loaded, nullptr);
  EXPECT_EQ(state_bytes(loaded), state_bytes(saved));
  EXPECT_EQ(std::memcmp(loaded.data_block(), saved.data_block(), saved.bytes()), 0);
}

TEST_F(StateCheckpoint, MissingUnknownOrMistypedStateIsAClearError) {
  auto error_loading_into = [&](const Graph& g) -> std::string {
    ParamStore p(g);
    try {
      load_checkpoint(path_, p, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const Graph with = graph_with_state(), without = graph_with_state(false);
  ParamStore a(with);
  a.init(1);
  save_checkpoint(path_, a, nullptr, "test");
  EXPECT_NE(error_loading_into(without).find("unknown tensor 'bn.running_mean'"), std::string::npos);
  EXPECT_NE(error_loading_into(graph_with_state(true, DType::F32)).find("is I64 but the model's is F32"),
            std::string::npos);
  ParamStore b(without);
  b.init(1);
  save_checkpoint(path_, b, nullptr, "test");
  EXPECT_NE(error_loading_into(with).find("state 'bn.running_mean' [6] is missing"), std::string::npos);
}

// The loader's parser, now reading I64 tensors too, against damaged files: every load either succeeds or
// is one crumb::Error (run under AddressSanitizer in CI, so a read out of bounds fails the test).
TEST_F(StateCheckpoint, DamagedFilesNeverCrash) {
  const Graph g = graph_with_state();
  ParamStore saved(g);
  saved.init(1);
  save_checkpoint(path_, saved, nullptr, "test");
  std::string good;
  {
    FILE* f = std::fopen(path_.c_str(), "rb");
    ASSERT_TRUE(f);
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) good.append(buf, n);
    std::fclose(f);
  }
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  auto next = [&] { return rng = rng * 6364136223846793005ull + 1442695040888963407ull, rng >> 33; };
  int errors = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = good;
    if (trial % 3 == 0) {
      bad.resize(next() % bad.size());  // truncated
    } else {
      for (int k = 0; k < 1 + trial % 4; ++k) bad[next() % bad.size()] = static_cast<char>(next());  // flipped
    }
    FILE* f = std::fopen(path_.c_str(), "wb");
    ASSERT_TRUE(f);
    std::fwrite(bad.data(), 1, bad.size(), f);
    std::fclose(f);
    ParamStore p(g);
    try {
      load_checkpoint(path_, p, nullptr);
    } catch (const Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 100);  // most damage is detected (flips inside tensor data are valid files)
}

}  // namespace
}  // namespace crumb
