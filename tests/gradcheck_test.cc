// Finite-difference gradient checks in double precision for every op case (tests/ops/registry.h) and for
// whole models, through the real autograd, planner and executor: the gradients of the input and of every
// parameter are compared to central differences of the loss.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/graph/autograd.h"
#include "engine/run/executor.h"
#include "engine/train/model_registry.h"
#include "tests/op_cases.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

// g must have its backward graph.
class GradCheck {
 public:
  GradCheck(Graph g, int batch, uint64_t seed) : g_(std::move(g)), batch_(batch) {
    params_ = std::make_unique<ParamStore>(g_);
    params_->init(seed);
    exec_ = std::make_unique<Executor>(g_, *params_, arena_, batch, Pass::Train);
    x_ = g_.find_value("x");
    y_ = g_.find_value("y");
    xdata_ = test::random_doubles(g_.value(x_).count(batch), unsigned(seed) + 1);
    labels_ = test::random_labels(batch, static_cast<int>(g_.value(g_.loss()).dims[0]), unsigned(seed) + 2);
    exec_->bind(x_, xdata_.data());
    exec_->bind(y_, labels_.data());
  }

  double loss() {
    exec_->run(batch_, true, true, 1.0 / batch_);
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

class OpGradCheck : public ::testing::TestWithParam<test::OpCase> {};

TEST_P(OpGradCheck, Float64) { GradCheck(test::op_graph(GetParam(), DType::F64), GetParam().batch, 7).run_all(); }

INSTANTIATE_TEST_SUITE_P(, OpGradCheck, ::testing::ValuesIn(test::op_cases()), test::op_case_name);

TEST(GradCheck, WholeModels) {
  for (const char* name : {"mlp", "lenet5", "cnn"}) {
    SCOPED_TRACE(name);
    Graph g = models::build(name, {1, 12, 12, 10}, DType::F64);
    build_backward(g);
    GradCheck(std::move(g), 2, 3).run_all();
  }
}

}  // namespace
}  // namespace crumb
