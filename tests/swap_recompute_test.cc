// Swapping and recomputation change where values live, never what is computed: a batch's gradients, running
// statistics and loss are the same bits with and without them, at any micro-batch size, while the arena
// holds less. And the copy queue that swapping runs on keeps its promises.
#include <gtest/gtest.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "engine/graph/autograd.h"
#include "engine/device/copy_queue.h"
#include "engine/base/error.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/norm.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/ops/swap.h"
#include "engine/graph/op.h"
#include "engine/strategy/recompute.h"
#include "engine/graph/saved_values.h"
#include "engine/train/scheduler.h"
#include "engine/strategy/swap.h"
#include "engine/train/model_registry.h"
#include "tests/batch_outcome.h"
#include "tests/ops/registry.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

constexpr int kChannels = 3, kSize = 8, kClasses = 5;

using Outcome = test::BatchOutcome;

Graph model(const std::string& name, int size = kSize) {
  models::NormSpec norm;
  norm.bn.group = 4;
  Graph g = models::build(name, {kChannels, size, size, kClasses, norm, 0.5});
  build_backward(g);
  return g;
}

Outcome run_batch(const Graph& g, int m, int batch) { return test::run_one_batch(g, m, batch, kClasses); }

void expect_identical(const Outcome& got, const Outcome& want) {
  EXPECT_EQ(got.loss_sum, want.loss_sum);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  EXPECT_EQ(0, std::memcmp(got.grads.data(), want.grads.data(), got.grads.size() * sizeof(float))) << "gradients";
  EXPECT_EQ(got.state, want.state) << "running statistics";
  EXPECT_EQ(got.tracked, want.tracked);
}

using test::all_recomputable;
using test::all_saved;

SwapTiming window(std::size_t bytes) { return test::swap_window(bytes); }

TEST(Recompute, GradientsAreIdenticalAndTheArenaSmaller) {
  for (const char* name : {"resnet20", "cnn", "lenet5"}) {
    SCOPED_TRACE(name);
    const int size = std::string(name) == "resnet20" ? kSize : 28;
    const Graph plain = model(name, size);
    Graph g = plain;
    const std::vector<ValueId> values = all_recomputable(g);
    ASSERT_FALSE(values.empty());
    EXPECT_GT(recompute(g, values), 0);
    for (int m : {12, 4}) {
      SCOPED_TRACE("micro-batch " + std::to_string(m));
      const Outcome want = run_batch(plain, m, 12), got = run_batch(g, m, 12);
      expect_identical(got, want);
      // lenet5's and cnn's peak is in their first layers, before anything is saved; resnet20's is not.
      if (std::string(name) == "resnet20") {
        EXPECT_LT(got.arena, want.arena);
      }
      EXPECT_LE(got.arena, want.arena);
    }
  }
}

TEST(Recompute, DropoutDrawsTheSameMaskAgain) {
  Graph plain;
  const ValueId x = plain.input("x", {kChannels, kSize, kSize}), y = plain.input("y", {}, DType::I32);
  ValueId h = nn::relu(plain, nn::conv2d(plain, x, 8, 3, "conv", nn::ConvOptions().with_pad(1)), "relu");
  h = nn::max_pool2d(plain, nn::dropout(plain, h, 0.5, "drop"), 2, 2, "pool");
  nn::softmax_cross_entropy(plain, nn::linear(plain, nn::flatten(plain, h, "flat"), kClasses, "fc"), y, "loss");
  build_backward(plain);
  Graph g = plain;
  const std::vector<ValueId> values = all_recomputable(g);
  ASSERT_TRUE(std::any_of(values.begin(), values.end(),
                          [&](ValueId v) { return g.node(g.value(v).producer).def == &kDropout; }));
  recompute(g, values);
  for (int m : {12, 5}) expect_identical(run_batch(g, m, 12), run_batch(plain, m, 12));
}

TEST(Recompute, ARecomputedBatchNormDoesNotUpdateItsStatisticsTwice) {
  const Graph plain = model("resnet20");
  Graph g = plain;
  recompute(g, all_recomputable(g));
  int applies = 0;
  for (NodeId i = 0; i < g.num_nodes(); ++i) applies += g.node(i).def == &kBatchNormApply;
  EXPECT_GT(applies, 0);
  // Identical running statistics (expect_identical) after one batch are the proof; the eval pass has none.
  for (NodeId i = 0; i < g.num_nodes(); ++i)
    if (g.node(i).def == &kBatchNormApply) {
      EXPECT_TRUE(g.node(i).backward && g.node(i).train_only);
    }
}

TEST(Recompute, RefusesValuesItCannotRecompute) {
  Graph g = model("resnet20");
  ValueId stats = -1;  // a BatchNorm's statistics: recomputing them would count the batch twice
  for (const SavedValue& s : saved_values(g))
    if (g.node(s.produced).def == &kBatchNorm && s.value == g.node(s.produced).out[1]) stats = s.value;
  ASSERT_GE(stats, 0);
  const std::string msg = test::error_of([&] { recompute(g, {stats}); });
  EXPECT_NE(msg.find("not a forward value of an op that can be recomputed"), std::string::npos) << msg;
}

// Convolutions too: every saved value of resnet20 recomputed from the input up (each once, memoised).
TEST(Recompute, WholeChainsIncludingConvolutions) {
  const Graph plain = model("resnet20");
  Graph g = plain;
  std::vector<ValueId> all;
  for (const SavedValue& s : saved_values(g))
    if (recomputable(g, s.value)) all.push_back(s.value);
  EXPECT_GT(recompute(g, all), 0);
  for (int m : {12, 4}) expect_identical(run_batch(g, m, 12), run_batch(plain, m, 12));
}

TEST(Swap, GradientsAreIdenticalAndTheArenaSmaller) {
  for (const char* name : {"resnet20", "cnn"}) {
    SCOPED_TRACE(name);
    const int size = std::string(name) == "resnet20" ? kSize : 28;
    const Graph plain = model(name, size);
    for (std::size_t window_bytes : {std::size_t{0}, std::size_t{1} << 20}) {
      Graph g = plain;
      const SwapResult r = swap(g, all_saved(g), 12, window(window_bytes));
      ASSERT_FALSE(r.swapped.empty());
      EXPECT_EQ(r.swapped.size(), r.host.size());
      for (int m : {12, 4}) {
        SCOPED_TRACE("window " + std::to_string(window_bytes) + ", micro-batch " + std::to_string(m));
        const Outcome want = run_batch(plain, m, 12), got = run_batch(g, m, 12);
        expect_identical(got, want);
        if (std::string(name) == "resnet20") {
        EXPECT_LT(got.arena, want.arena);
      }
        EXPECT_LE(got.arena, want.arena);
        EXPECT_GT(got.host_pool, 0u);
      }
    }
  }
}

TEST(Swap, AndRecomputeTogether) {
  const Graph plain = model("resnet20");
  Graph g = plain;
  recompute(g, all_recomputable(g));
  const SwapResult r = swap(g, all_saved(g), 8, window(std::size_t{1} << 20));
  ASSERT_FALSE(r.swapped.empty());
  expect_identical(run_batch(g, 4, 10), run_batch(plain, 4, 10));
}

TEST(Swap, ValuesThatComeBackAtOnceStay) {
  {
    // One unit of time per node and per copy: a value leaves the arena only if at least one node runs
    // between the copy out's wait (after its last forward reader, and a node after it is computed) and the
    // node before its first backward reader, where the copy back starts.
    Graph g = model("resnet20");
    const std::vector<SavedValue> saved = saved_values(g);
    const SwapResult r = swap(g, all_saved(g), 4, window(1 << 20));
    for (const SavedValue& s : saved) {
      const bool swapped = std::find(r.swapped.begin(), r.swapped.end(), s.value) != r.swapped.end();
      EXPECT_EQ(swapped, s.first_backward - 1 > std::max(s.last_forward, s.produced + 1) + 1) << g.value(s.value).name;
    }
  }
  // Copies slower than the nodes: waits move later, never past the forward pass, and every value swapped
  // still leaves the arena for at least one node.
  Graph g = model("resnet20");
  const std::size_t saved = saved_values(g).size();
  SwapTiming slow = window(1 << 20);
  slow.node_seconds.assign(g.num_nodes(), 1.0);
  slow.seconds_per_byte = 1.0 / 4096;  // a 16 KiB value takes four nodes
  const SwapResult r = swap(g, all_saved(g), 4, slow);
  EXPECT_FALSE(r.swapped.empty());
  EXPECT_LE(r.swapped.size(), saved);
  const int backward_from = first_backward_node(g);
  std::vector<NodeId> out_wait(g.num_values(), -1), in_start(g.num_values(), -1);
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.def == &kSwapWait && !n.backward) out_wait[n.in[0]] = i;
    if (n.def == &kSwapCopy && n.backward) in_start[n.in[0]] = i;  // reads the host copy
  }
  for (std::size_t k = 0; k < r.swapped.size(); ++k) {
    EXPECT_GT(in_start[r.host[k]], out_wait[r.swapped[k]] + 1) << g.value(r.swapped[k]).name;
    EXPECT_LT(out_wait[r.swapped[k]], backward_from) << g.value(r.swapped[k]).name;
  }
}

TEST(Swap, PrefetchStaysInsideItsWindow) {
  Graph g = model("resnet20");
  const std::vector<ValueId> values = all_saved(g);
  const std::size_t window_bytes = 64 << 10;
  swap(g, values, 4, window(window_bytes));
  // Bytes copied back and not yet read, at every node: within the window, or one value when a single one
  // is larger than the window (it then starts just before its reader).
  std::vector<int> started(g.num_values(), -1);
  std::size_t largest = 0;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.def == &kSwapCopy && n.backward) started[n.out[0]] = i;
  }
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    std::size_t in_flight = 0;
    for (ValueId v = 0; v < g.num_values(); ++v) {
      if (started[v] < 0 || started[v] > i) continue;
      NodeId waited = -1;
      for (NodeId j = started[v]; j < g.num_nodes() && waited < 0; ++j)
        if (g.node(j).def == &kSwapWait && g.node(j).in[0] == v) waited = j;
      const std::size_t bytes = static_cast<std::size_t>(g.value(v).count(4)) * 4;
      largest = std::max(largest, bytes);
      if (waited > i) in_flight += bytes;
    }
    EXPECT_LE(in_flight, std::max(window_bytes, largest)) << "at node " << i;
  }
}

TEST(CopyQueue, CopiesInOrderAndWaitsForEach) {
  ThreadCopyQueue q(3);
  std::vector<char> a(1 << 20, 'a'), b(1 << 20, 0), c(1 << 20, 0);
  q.start(0, b.data(), a.data(), a.size());
  q.start(1, c.data(), b.data(), b.size());  // runs after the first: copies what it wrote
  q.wait(1);
  EXPECT_EQ(c, a);
  q.wait(0);
  q.wait(2);  // never started: returns at once
  for (int round = 0; round < 100; ++round) {  // a ticket is used again once its copy is done
    a[0] = static_cast<char>(round);
    q.start(2, b.data(), a.data(), 1);
    q.wait(2);
    ASSERT_EQ(b[0], a[0]);
  }
  const std::string msg = test::error_of([&] { q.start(3, b.data(), a.data(), 1); });
  EXPECT_NE(msg.find("ticket 3 is out of range"), std::string::npos) << msg;
}

}  // namespace
}  // namespace crumb
