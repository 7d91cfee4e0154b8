// Finite-difference gradient checks in double precision for every op case (tests/ops/registry.h) and for
// whole models, through the real autograd, planner and executor: the gradients of the input and of every
// parameter are compared to central differences of the loss. Then every op case in bf16 and f16 against
// its float64 run on the same values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

// ---- A case's 16-bit run against its float64 run on the same values: the probabilities, the loss sum, the
// input gradient and every parameter gradient, each within half_tolerance (tests/op_cases.h).

// What one forward + backward run gives, as doubles.
struct Tensor {
  std::string name;
  std::vector<double> values;
  bool param_grad;
};

std::vector<Tensor> run_once(const Graph& g, ParamStore& params, const void* x, const int32_t* y, int batch) {
  Arena arena;
  Executor exec(g, params, arena, batch, Pass::Train);
  const ValueId xv = g.find_value("x"), dx = g.value(xv).grad, probs = g.loss();
  exec.bind(xv, x);
  exec.bind(g.find_value("y"), y);
  exec.run(batch, true, true, 1.0 / batch);
  std::vector<Tensor> out{
      {"loss sum", {exec.results().loss_sum}, false},
      {"probabilities", test::host_values(exec.data(probs), g.value(probs).dtype, g.value(probs).count(batch)), false},
      {"input gradient", test::host_values(exec.data(dx), g.value(dx).dtype, g.value(dx).count(batch)), false}};
  for (ValueId p : g.params())
    out.push_back({g.value(p).name + " gradient",
                   test::host_values(params.grad(p), params.dtype(), g.value(p).count(1)), true});
  return out;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

void check_half_against_f64(const test::OpCase& c, DType half) {
  const Graph g64 = test::op_graph(c, DType::F64), g16 = test::op_graph(c, half);
  ParamStore p64(g64), p16(g16);
  // The 16-bit store starts from other values: the masters written below reach the ops only if
  // to_device() refreshes their 16-bit copies.
  p64.init(7);
  p16.init(8);
  // Every value exactly what the 16-bit run reads, so the float64 run is the exact result on its inputs:
  // float32 masters, rounded to 16-bit where the ops read the 16-bit copy.
  ASSERT_EQ(g64.params().size(), g16.params().size());
  for (std::size_t i = 0; i < g64.params().size(); ++i) {
    const ValueId p = g64.params()[i], q = g16.params()[i];
    double* d = static_cast<double*>(p64.data(p));
    float* m = static_cast<float*>(p16.data(q));
    for (int64_t e = 0; e < g64.value(p).count(1); ++e)
      d[e] = m[e] = test::round_to(g16.value(q).dtype, static_cast<float>(d[e]));
  }
  p64.to_device();
  p16.to_device();
  std::vector<double> x64 = test::random_doubles(g64.value(g64.find_value("x")).count(c.batch), 8);
  std::vector<float> x16(x64.size());
  for (std::size_t i = 0; i < x64.size(); ++i) x64[i] = x16[i] = test::round_to(half, static_cast<float>(x64[i]));
  const std::vector<int32_t> y = test::random_labels(c.batch, static_cast<int>(g64.value(g64.loss()).dims[0]), 9);

  const std::vector<Tensor> want = run_once(g64, p64, x64.data(), y.data(), c.batch),
                            got = run_once(g16, p16, x16.data(), y.data(), c.batch);
  ASSERT_EQ(got.size(), want.size());
  // A tensor's error is relative to its largest magnitude, the parameter gradients' to the largest of
  // them all: a gradient sum's rounding scales with its terms, not with its result, which may cancel to
  // nothing (the bias of a convolution before BatchNorm has the exact gradient 0).
  double param_scale = 0;
  for (const Tensor& t : want)
    if (t.param_grad) param_scale = std::max(param_scale, max_abs(t.values));
  const double u = test::unit_roundoff(half);
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].values.size(), want[i].values.size()) << got[i].name;
    double diff = 0;
    for (std::size_t e = 0; e < got[i].values.size(); ++e)
      diff = std::max(diff, std::isnan(got[i].values[e]) ? INFINITY : std::fabs(got[i].values[e] - want[i].values[e]));
    const double error = diff / std::max(1e-3, want[i].param_grad ? param_scale : max_abs(want[i].values));
    EXPECT_LE(error, test::half_tolerance(half)) << got[i].name << ": " << error / u << " u";
    worst = std::max(worst, error);
  }
  // In the XML report (--gtest_output=xml): the margin each case has, to tune tolerances by.
  ::testing::Test::RecordProperty(std::string("worst_error_in_u_") + dtype_name(half), std::to_string(worst / u));
}

TEST_P(OpGradCheck, Bf16AndF16) {
  for (DType half : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(half));
    check_half_against_f64(GetParam(), half);
  }
}

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
