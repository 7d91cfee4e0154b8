// Finite-difference gradient checks in double precision for every op, through the real autograd,
// planner and executor: the graph is input -> op(s) -> flatten -> softmax cross-entropy, and the
// gradients of the input and every parameter are compared to central differences of the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "engine/autograd.h"
#include "engine/executor.h"
#include "engine/layers.h"
#include "engine/rng.h"
#include "models/registry.h"

namespace crumb {
namespace {

using Body = std::function<ValueId(Graph&, ValueId)>;

class GradCheck {
 public:
  GradCheck(Graph g, int batch, uint64_t seed) : g_(std::move(g)), batch_(batch) {
    build_backward(g_);
    params_ = std::make_unique<ParamStore>(g_);
    params_->init(seed);
    exec_ = std::make_unique<Executor>(g_, *params_, arena_, batch, Pass::Train);
    x_ = g_.find_value("x");
    y_ = g_.find_value("y");
    Rng rng(seed + 1);
    xdata_.resize(g_.value(x_).count(batch));
    for (double& v : xdata_) v = 2 * rng.uniform() - 1;
    const int classes = static_cast<int>(g_.value(g_.loss()).dims[0]);
    for (int i = 0; i < batch; ++i) labels_.push_back(static_cast<int32_t>(rng.next() % classes));
    exec_->bind(x_, xdata_.data());
    exec_->bind(y_, labels_.data());
  }

  double loss() {
    exec_->run(batch_, true, 1.0 / batch_);
    return exec_->results().loss_sum / batch_;
  }

  // Checks d loss / d t for up to max_checks evenly spread elements of the buffer t (count n).
  void check(const char* what, double* t, int64_t n, const double* analytic, int max_checks = 60) {
    const int64_t stride = std::max<int64_t>(1, n / max_checks);
    for (int64_t i = 0; i < n; i += stride) {
      const double keep = t[i], eps = 1e-6;
      t[i] = keep + eps;
      const double up = loss();
      t[i] = keep - eps;
      const double down = loss();
      t[i] = keep;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(analytic[i], numeric, 1e-7 + 1e-5 * std::fabs(numeric)) << what << "[" << i << "]";
    }
  }

  void run_all() {
    loss();
    const ValueId dx = g_.value(x_).grad;
    std::vector<double> grad_x;
    if (dx >= 0) grad_x.assign(static_cast<const double*>(exec_->data(dx)),
                               static_cast<const double*>(exec_->data(dx)) + xdata_.size());
    std::vector<std::vector<double>> grad_p;
    for (ValueId p : g_.params()) {
      const double* gp = static_cast<const double*>(params_->grad(p));
      grad_p.emplace_back(gp, gp + g_.value(p).count(1));
    }
    if (dx >= 0) check("x", xdata_.data(), static_cast<int64_t>(xdata_.size()), grad_x.data());
    for (size_t i = 0; i < g_.params().size(); ++i) {
      const ValueId p = g_.params()[i];
      check(g_.value(p).name.c_str(), static_cast<double*>(params_->data(p)), g_.value(p).count(1), grad_p[i].data());
    }
  }

 private:
  Graph g_;
  int batch_;
  Arena arena_;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<Executor> exec_;
  ValueId x_ = -1, y_ = -1;
  std::vector<double> xdata_;
  std::vector<int32_t> labels_;
};

void check_op(const Dims& x_dims, int batch, const Body& body) {
  Graph g;
  g.set_float_dtype(DType::F64);
  const ValueId x = g.input("x", x_dims, DType::F64, /*requires_grad=*/true);
  const ValueId y = g.input("y", {}, DType::I32);
  ValueId h = body(g, x);
  if (g.value(h).dims.size() != 1) h = nn::flatten(g, h, "flat");
  nn::softmax_cross_entropy(g, h, y, "loss");
  GradCheck(std::move(g), batch, 7).run_all();
}

TEST(GradCheck, Linear) {
  check_op({5}, 3, [](Graph& g, ValueId x) { return nn::linear(g, x, 4, "fc"); });
}
TEST(GradCheck, LinearNoBias) {
  check_op({6}, 2, [](Graph& g, ValueId x) { return nn::linear(g, x, 3, "fc", false); });
}
TEST(GradCheck, Conv2dStridePad) {
  check_op({2, 7, 6}, 3, [](Graph& g, ValueId x) { return nn::conv2d(g, x, 3, 3, 2, 1, "conv"); });
}
TEST(GradCheck, Conv2dNoBias5x5) {
  check_op({3, 8, 8}, 2, [](Graph& g, ValueId x) { return nn::conv2d(g, x, 2, 5, 1, 2, "conv", false); });
}
TEST(GradCheck, Conv2d1x1) {
  check_op({4, 3, 5}, 2, [](Graph& g, ValueId x) { return nn::conv2d(g, x, 3, 1, 1, 0, "conv"); });
}
TEST(GradCheck, MaxPool) {
  check_op({2, 6, 6}, 2, [](Graph& g, ValueId x) { return nn::max_pool2d(g, x, 2, 2, "pool"); });
}
TEST(GradCheck, MaxPoolOverlappingPadded) {
  check_op({2, 7, 5}, 2, [](Graph& g, ValueId x) { return nn::max_pool2d(g, x, 3, 2, "pool", 1); });
}
TEST(GradCheck, AvgPoolPadded) {
  check_op({2, 7, 6}, 2, [](Graph& g, ValueId x) { return nn::avg_pool2d(g, x, 3, 2, "pool", 1); });
}
TEST(GradCheck, GlobalAvgPool) {
  check_op({3, 4, 5}, 2, [](Graph& g, ValueId x) { return nn::global_avg_pool(g, x, "gap"); });
}
TEST(GradCheck, Relu) {
  check_op({8}, 3, [](Graph& g, ValueId x) { return nn::relu(g, nn::linear(g, x, 6, "fc"), "relu"); });
}
TEST(GradCheck, AddWithSharedInputSumsGradients) {
  // x feeds both the add and the relu: its gradient is the sum of two contributions.
  check_op({6}, 2, [](Graph& g, ValueId x) {
    const ValueId h = nn::linear(g, x, 5, "fc");
    return nn::add(g, h, nn::relu(g, h, "relu"), "add");
  });
}
TEST(GradCheck, FlattenOfConv) {
  check_op({1, 5, 5}, 2, [](Graph& g, ValueId x) {
    return nn::linear(g, nn::flatten(g, nn::conv2d(g, x, 2, 3, 1, 0, "conv"), "flat"), 3, "fc");
  });
}
TEST(GradCheck, SharedWeightsAccumulate) {
  // The same linear layer applied twice: both backward nodes write one parameter gradient.
  check_op({4}, 2, [](Graph& g, ValueId x) {
    const ValueId h = nn::relu(g, nn::linear(g, x, 4, "fc"), "r1");
    Node n;
    n.def = &kLinear;
    n.name = "fc_again";
    n.in = {h, g.find_value("fc.weight"), g.find_value("fc.bias")};
    Value out;
    out.name = "fc_again";
    out.dtype = DType::F64;
    out.batched = true;
    out.requires_grad = true;
    n.out = {g.add_value(out)};
    g.add_node(n);
    return n.out[0];
  });
}

TEST(GradCheck, WholeModels) {
  for (const char* name : {"mlp", "lenet5", "cnn"}) {
    SCOPED_TRACE(name);
    Graph g = models::build(name, {1, 12, 12, 10}, DType::F64);
    GradCheck(std::move(g), 2, 3).run_all();
  }
}

}  // namespace
}  // namespace crumb
