// The optimizer stepping in the backward pass (engine/optim/step_in_backward.h): the same bits as the step
// after it on every model, optimizer and precision; gradients in the arena until their parameter's last
// reader; chosen by the plan only where nothing else meets the budget, and never where it cannot be exact.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/graph/autograd.h"
#include "engine/plan/arena_blocks.h"
#include "engine/strategy/memory_report.h"
#include "engine/train/model_registry.h"
#include "engine/train/trainer.h"
#include "tests/batch_outcome.h"
#include "tests/optimizer_configs.h"
#include "tests/test_util.h"

namespace crumb {
namespace {

constexpr int kClasses = 5, kBatch = 8, kBatches = 3;

struct Trained {
  std::string params, state;
  std::size_t grads = 0;  // the plan's persistent gradient bytes
  bool stepped_in_backward = false;
};

std::string bytes_of(const void* p, std::size_t n) { return {static_cast<const char*>(p), n}; }

// mlp's backward pass with its classifier's weight gradient made before its data gradient, which reads
// the weight after its gradient is whole: the update must wait for that read.
Graph weight_gradient_first(DType dtype) {
  Graph g = models::build("mlp", {3, 12, 12, kClasses, {}}, dtype);
  build_backward(g);
  std::vector<NodeId> order;
  for (NodeId i = 0; i < g.num_nodes(); ++i) order.push_back(i);
  NodeId data = -1, weight = -1;
  for (NodeId i = 0; i < g.num_nodes(); ++i) {
    if (g.node(i).name == "5.backward_data") data = i;
    if (g.node(i).name == "5.backward_weight") weight = i;
  }
  CRUMB_CHECK(data >= 0 && weight == data + 1, "mlp's classifier has no data gradient then weight gradient");
  std::swap(order[data], order[weight]);
  g.reorder(order);
  return g;
}

// kBatches batches of random samples (the last one short) through a Trainer of `model` ("mlp, weight gradient
// first": weight_gradient_first's graph, planned as given), the optimizer stepping in the backward pass or
// after it.
Trained train(const std::string& model, const OptimizerConfig& opt, Precision precision, bool in_backward,
              Device device = Device::CPU) {
  const bool reordered = model == "mlp, weight gradient first";
  const int side = reordered ? 12 : std::max(12, models::min_image_size(model));
  models::NormSpec norm;
  norm.bn.group = 4;
  Graph g = reordered ? weight_gradient_first(activation_dtype(precision))
                      : models::build(model, {3, side, side, kClasses, norm}, activation_dtype(precision));
  g.set_step_in_backward(in_backward);
  // Two CUDA runs give the same bits with cuDNN's deterministic algorithms only.
  g.set_deterministic(device == Device::CUDA);
  const int samples = kBatch * kBatches - 3;
  TrainConfig cfg = test::one_batch_config(kBatch, kBatch, device);
  cfg.shuffle = false;
  cfg.optimizer = opt;
  cfg.precision = precision;
  cfg.deterministic = device == Device::CUDA;
  const Dims& x = g.value(g.find_value("x")).dims;
  auto data = test::batch_of(test::random_floats(samples * dims_count(x), 6), x,
                             test::random_labels(samples, kClasses, 7), kClasses);
  Trainer t(cfg, std::move(g), std::move(data));
  t.prepare();
  t.start_epoch(0);
  StepInfo step;
  for (int b = 0; b < kBatches; ++b) EXPECT_TRUE(t.train_batch(step)) << model;
  EXPECT_EQ(t.optimizer().steps(), kBatches);
  EXPECT_EQ(t.optimizer().nonfinite_parameters(), 0u);
  t.params().to_host();
  t.optimizer().to_host();
  Trained out;
  out.params = bytes_of(t.params().data_block(), t.params().bytes());
  for (const StateBlock& s : t.optimizer().state()) out.state += bytes_of(s.block.host(), s.block.size());
  out.grads = measure_memory(t.graph(), t.micro_batch(), cfg.optimizer, device, 0, kBatch).grads;
  out.stepped_in_backward = t.graph().step_in_backward();
  return out;
}

// Each parameter's update is the one the step after the backward pass makes, element for element: every
// model (fused, so the fused backward steps' readers count too), SGD with momentum, Nesterov and weight
// decay, AdamW, float32 and bf16 (whose 16-bit parameter copies the update writes).
TEST(StepInBackward, TrainsTheBitsOfTheStepAfterTheBackwardPass) {
  const OptimizerConfig optimizers[] = {sgd_config(0.05, 0.9, 1e-3, true), adamw_config(3e-3, 0.01)};
  for (const char* model : {"mlp", "lenet5", "cnn", "resnet20", "mlp, weight gradient first"})
    for (const OptimizerConfig& opt : optimizers)
      for (Precision precision : {Precision::FP32, Precision::BF16}) {
        SCOPED_TRACE(std::string(model) + " " + optimizer_name(opt.kind) + " " + precision_name(precision));
        const Trained after = train(model, opt, precision, false), during = train(model, opt, precision, true);
        ASSERT_FALSE(after.stepped_in_backward);
        ASSERT_TRUE(during.stepped_in_backward);
        EXPECT_GT(after.grads, 0u);
        EXPECT_EQ(during.grads, 0u);
        EXPECT_TRUE(during.params == after.params);
        EXPECT_TRUE(during.state == after.state);
      }
}

// On CUDA each update is a launch on the compute stream, in order with the backward pass's kernels (a
// run told to an observer is never recorded).
TEST(StepInBackward, TrainsTheBitsOfTheStepAfterTheBackwardPassOnCuda) {
  CRUMB_REQUIRE_GPU();
  for (const char* model : {"lenet5", "resnet20", "mlp, weight gradient first"})
    for (const OptimizerConfig& opt : {sgd_config(0.05, 0.9, 1e-3, true), adamw_config(3e-3, 0.01)}) {
      SCOPED_TRACE(std::string(model) + " " + optimizer_name(opt.kind));
      const Trained after = train(model, opt, Precision::FP32, false, Device::CUDA),
                    during = train(model, opt, Precision::FP32, true, Device::CUDA);
      ASSERT_TRUE(during.stepped_in_backward);
      EXPECT_TRUE(during.params == after.params);
      EXPECT_TRUE(during.state == after.state);
    }
}

// Every gradient lives in the arena from its first writer until the last step with a kernel that reads its
// parameter: an update any earlier would change what a later step reads, and the gradient's bytes are not
// handed to another value before the update has read them.
TEST(StepInBackward, GradientsLiveUntilTheirParametersLastReader) {
  int read_after_written = 0;
  for (const char* model : {"lenet5", "resnet20", "mlp, weight gradient first"}) {
    Graph g = std::string(model) == "lenet5" || std::string(model) == "resnet20"
                  ? models::build(model, {3, 16, 16, kClasses, {}})
                  : weight_gradient_first(DType::F32);
    if (!g.node(g.num_nodes() - 1).backward) build_backward(g);
    g.set_step_in_backward(true);
    const CompiledPass train = compile_pass(g, Pass::Train, 4, Device::CPU, 0);
    const MemoryPlan& p = train.plan;
    for (ValueId w : g.params()) {
      const ValueId dw = g.value(w).grad;
      ASSERT_GE(p.offset[dw], 0) << g.value(dw).name << " is not in the arena";
      int last_read = -1;
      for (int s = 0; s < static_cast<int>(p.order.size()); ++s) {
        const Node& n = g.node(p.order[s]);
        for (ValueId v : n.in)
          if (!n.def->view && g.storage_root(v) == w) last_read = s;
      }
      EXPECT_EQ(p.last[dw], std::max(last_read, p.first[dw])) << model << " " << g.value(dw).name;
      EXPECT_TRUE(g.node(p.order[p.last[dw]]).backward) << g.value(dw).name;
      read_after_written += last_read > p.first[dw];
    }
  }
  EXPECT_EQ(read_after_written, 1);  // the reordered classifier's weight
}

TrainConfig mlp_config(std::size_t budget, int micro_batch) {
  TrainConfig c;
  c.model = "mlp";
  c.batch = 64;
  c.micro_batch = micro_batch;
  c.memory_budget = budget;
  return c;
}

const data::DataShape kMnist{1, 28, 28, 10};

// The plan takes it only where no other plan meets the budget at the whole batch in one micro-batch (which
// it needs), and says so; micro-batching comes first, and fp16 loss scaling or several ranks rule it out.
TEST(StepInBackward, PlansTakeItOnlyWhereNothingElseFits) {
  const RunPlan roomy = plan_run(mlp_config(std::size_t{1} << 30, 64), kMnist, 64, Device::CPU);
  EXPECT_FALSE(roomy.graph.step_in_backward());
  const OptimizerConfig opt = mlp_config(0, 64).optimizer;
  Graph stepping = roomy.graph;
  stepping.set_step_in_backward(true);
  const std::size_t kept = measure_memory(roomy.graph, 64, opt, Device::CPU, 0, 64).total(),
                    arena = measure_memory(stepping, 64, opt, Device::CPU, 0, 64).total();
  ASSERT_LT(arena, kept);
  const std::size_t between = (kept + arena) / 2;

  const RunPlan tight = plan_run(mlp_config(between, 64), kMnist, 64, Device::CPU);
  EXPECT_TRUE(tight.graph.step_in_backward());
  EXPECT_EQ(tight.strategy.plan.micro_batch, 64);
  EXPECT_NE(tight.split.find("the optimizer steps in the backward pass"), std::string::npos) << tight.split;

  const RunPlan smaller = plan_run(mlp_config(between, 0), kMnist, 64, Device::CPU);
  EXPECT_FALSE(smaller.graph.step_in_backward());
  EXPECT_LT(smaller.strategy.plan.micro_batch, 64);

  EXPECT_THROW(plan_run(mlp_config(between, 64), kMnist, 64, Device::CPU, 2), Error);
  TrainConfig fp16 = mlp_config(between, 64);
  fp16.precision = Precision::FP16;
  EXPECT_THROW(plan_run(fp16, kMnist, 64, Device::CPU), Error);
  EXPECT_THROW(plan_run(mlp_config(arena - 4096, 64), kMnist, 64, Device::CPU), Error);

  // Where micro-batching's least is the smaller micro-batch's, its error names this plan's lower least.
  try {
    plan_run(mlp_config(1024, 0), kMnist, 2, Device::CPU);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("less fits with the whole batch of 2 as one micro-batch and the optimizer "
                                         "stepping in the backward pass: --memory-budget "),
              std::string::npos)
        << e.what();
  }
}

// The frontier goes on below the least of the plans that keep their gradients, with the points of plans
// stepping in the backward pass, where the plan at the frontier's micro-batch may take one.
TEST(StepInBackward, TheFrontierHasItsPoints) {
  TrainConfig c = mlp_config(std::size_t{1} << 30, 64);
  c.strategy = Strategy::Recompute;
  const Frontier f = plan_frontier(c, kMnist, 64, Device::CPU, 64);
  std::size_t stepping = SIZE_MAX, kept = SIZE_MAX;
  for (const FrontierPoint& p : f.points) {
    std::size_t& least = p.graph.find("stepping") != std::string::npos ? stepping : kept;
    least = std::min(least, p.total);
  }
  EXPECT_LT(stepping, kept);
  EXPECT_EQ(f.points.front().total, stepping);
  // Not at a micro-batch below the batch.
  for (const FrontierPoint& p : plan_frontier(c, kMnist, 64, Device::CPU, 32).points)
    EXPECT_EQ(p.graph.find("stepping"), std::string::npos) << p.graph;
}

// A plan stepping in the backward pass runs batches of its micro-batch at most: a later fit on more samples
// than the first one had (a larger batch) is refused, not run in micro-batches whose gradients would be lost.
TEST(StepInBackward, ALargerBatchLaterIsRefused) {
  Graph g = models::build("mlp", {1, 12, 12, kClasses, {}});
  g.set_step_in_backward(true);
  const Dims x = g.value(g.find_value("x")).dims;
  auto samples = [&](int n) {
    return test::batch_of(test::random_floats(n * dims_count(x), 6), x, test::random_labels(n, kClasses, 7), kClasses);
  };
  TrainConfig cfg;
  cfg.model = "test graph";
  cfg.batch = 16;
  Trainer t(cfg, std::move(g), samples(8));
  EXPECT_EQ(t.micro_batch(), 8);
  try {
    t.train_more(samples(16), 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("for batches of up to 8 samples"), std::string::npos) << e.what();
  }
}

// The memory report's blocks name the gradients in the arena as parameter gradients, from their first writer.
TEST(StepInBackward, TheArenaMapShowsParameterGradients) {
  Graph g = models::build("lenet5", {1, 28, 28, kClasses, {}});
  build_backward(g);
  g.set_step_in_backward(true);
  const CompiledPass train = compile_pass(g, Pass::Train, 4, Device::CPU, 0);
  int gradients = 0;
  for (const ArenaBlock& b : arena_blocks(g, train.plan, 4))
    if (b.role == BlockRole::ParamGradient) {
      ++gradients;
      EXPECT_NE(b.layer.find("backward"), std::string::npos) << b.layer;
    }
  EXPECT_EQ(gradients, static_cast<int>(g.params().size()));
}

// Whoever reads the gradients of a plan that keeps none (a batch hook) is told why.
TEST(StepInBackward, ReadingTheGradientsIsAClearError) {
  Graph g = models::build("mlp", {1, 28, 28, kClasses, {}});
  g.set_step_in_backward(true);
  build_backward(g);
  ParamStore params(g);
  try {
    params.grad(g.params()[0]);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("steps in the backward pass"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace crumb
