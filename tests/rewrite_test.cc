// Rewrites keep results identical: the same model with and without them gives the same loss and
// the same parameter gradients, and the rewrite leaves branches it cannot prove safe alone.
#include <gtest/gtest.h>

#include "engine/graph/autograd.h"
#include "engine/run/executor.h"
#include "engine/ops/conv2d.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax_xent.h"
#include "engine/ops/rewrite.h"
#include "engine/graph/rng.h"
#include "engine/train/model_registry.h"

namespace crumb {
namespace {

struct Result {
  double loss;
  std::vector<double> grads;
};

Result run(Graph g, int batch) {
  build_backward(g);
  ParamStore params(g);
  params.init(5);
  Arena arena;
  Executor e(g, params, arena, batch, Pass::Train);
  Rng rng(3);
  std::vector<double> x(g.value(g.find_value("x")).count(batch));
  for (double& v : x) v = 2 * rng.uniform() - 1;
  std::vector<int32_t> y(batch);
  for (int32_t& v : y) v = static_cast<int32_t>(rng.below(10));
  e.bind(g.find_value("x"), x.data());
  e.bind(g.find_value("y"), y.data());
  e.run(batch, true, true, 1.0 / batch);
  const double* gp = static_cast<const double*>(params.grad_block());
  return {e.results().loss_sum, std::vector<double>(gp, gp + params.count())};
}

Graph lenet_like(bool rewrite) {
  Graph g;
  g.set_float_dtype(DType::F64);
  const ValueId x = g.input("x", {1, 12, 12});
  const ValueId y = g.input("y", {}, DType::I32);
  ValueId h =
      nn::max_pool2d(g, nn::relu(g, nn::conv2d(g, x, 4, 3, "0", nn::ConvOptions().with_pad(1)), "1"), 2, 2, "2");
  h = nn::max_pool2d(g, nn::relu(g, nn::conv2d(g, h, 4, 3, "3", nn::ConvOptions().with_pad(1)), "4"), 3, 2, "5", 1);
  nn::softmax_cross_entropy(g, nn::linear(g, nn::flatten(g, h, "6"), 10, "7"), y, "loss");
  if (rewrite) {
    EXPECT_EQ(reorder_relu_max_pool(g), 2);
  }
  return g;
}

TEST(Rewrite, ReluMaxPoolReorderIsExact) {
  const Result a = run(lenet_like(false), 6), b = run(lenet_like(true), 6);
  EXPECT_EQ(a.loss, b.loss);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_EQ(a.grads[i], b.grads[i]) << i;
}

TEST(Rewrite, ReferenceModelsArePooledBeforeRelu) {
  const Graph g = models::build("lenet5");
  int pools = 0;
  for (int i = 0; i < g.num_nodes(); ++i) {
    if (g.node(i).def != &kMaxPool2d) continue;
    ++pools;
    EXPECT_EQ(g.node(g.value(g.node(i).in[0]).producer).def, &kConv2d);
  }
  EXPECT_EQ(pools, 2);
}

TEST(Rewrite, LeavesSharedReluOutputAlone) {
  Graph g;
  const ValueId x = g.input("x", {2, 8, 8});
  const ValueId y = g.input("y", {}, DType::I32);
  const ValueId r = nn::relu(g, nn::conv2d(g, x, 2, 3, "c", nn::ConvOptions().with_pad(1)), "r");
  const ValueId p = nn::max_pool2d(g, r, 2, 2, "p");
  const ValueId skip = nn::global_avg_pool(g, r, "gap");  // r has a second consumer
  nn::softmax_cross_entropy(g, nn::add(g, nn::global_avg_pool(g, p, "gap2"), skip, "sum"), y, "loss");
  EXPECT_EQ(reorder_relu_max_pool(g), 0);
}

}  // namespace
}  // namespace crumb
