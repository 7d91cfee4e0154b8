#include "engine/train/summary.h"

#include <algorithm>

#include "engine/base/rss.h"
#include "engine/io/json.h"
#include "kernels/cpu_kernels.h"

namespace crumb {

RunSummary summarize(Trainer& t, const FitResult& r) {
  const TrainConfig& c = t.config();
  const StrategyChoice& choice = t.plan().strategy.choice;
  const MemoryPlan& plan = t.scheduler().train_executor().plan();
  Optimizer& opt = t.optimizer();
  RunSummary s;
  s.model = c.model;
  s.dataset = c.data.dataset;
  s.epochs = c.epochs;
  s.batch = t.batch();
  s.micro_batch = t.micro_batch();
  s.threads = c.threads;
  s.seed = c.seed;
  s.samples_per_s = r.samples_per_s();
  s.train_seconds = r.train_seconds;
  s.test_accuracy = r.test.accuracy;
  s.test_loss = r.test.loss;
  s.final_loss = r.last_loss;
  s.parameters = static_cast<long long>(t.params().num_parameters());
  s.arena_bytes = t.arena_bytes();
  s.arena_lower_bound = plan.lower_bound;
  s.device = device_name(t.device());
  if (t.device() == Device::CPU) {
    s.cpu_kernels = cpu::vector_isa();
    if (c.precision == Precision::BF16) s.cpu_bf16 = cpu::bf16_multiply();
  }
  s.precision = precision_name(c.precision);
  s.tf32 = c.precision == Precision::TF32 && backend(t.device()).has_tf32();
  s.loss_scale = t.loss_scaler().scale();
  s.skipped_steps = t.loss_scaler().skipped();
  s.cuda_graphs = t.scheduler().train_executor().recording();
  s.deterministic = c.deterministic;
  s.optimizer = optimizer_name(opt.kind());
  s.lr_schedule = lr_schedule_name(c.optimizer.schedule.kind);
  s.final_lr = opt.lr(std::max(opt.steps() - 1, 0LL));
  s.memory_budget = t.plan().budget;
  s.max_rss_bytes = max_rss_bytes();
  s.strategy = strategy_name(c.strategy);
  s.strategy_used = choice.used;
  s.step_in_backward = t.graph().step_in_backward();
  s.swapped = choice.swapped.size();
  s.recomputed = choice.recomputed.size();
  s.host_pool_bytes = plan.host_pool_bytes;
  s.predicted_step_s = choice.predicted_seconds;
  s.in_memory_step_s = choice.in_memory_seconds;
  s.measured_step_s = r.micro_batches ? r.batch_seconds / r.micro_batches : 0.0;
  s.ranks = t.ranks();
  if (const GradientReducer* reducer = t.reducer()) {
    s.data_parallel = true;
    s.buckets = reducer->buckets().size();
    s.allreduce_seconds = reducer->timing().span_seconds;
    s.allreduce_wait_seconds = reducer->timing().waited_seconds;
  }
  return s;
}

std::string to_json(const RunSummary& s) {
  auto size = [](std::size_t v) { return static_cast<long long>(v); };
  json::ObjectWriter w;
  w.string("model", s.model)
      .string("dataset", s.dataset)
      .integer("epochs", s.epochs)
      .integer("batch", s.batch)
      .integer("micro_batch", s.micro_batch)
      .integer("threads", s.threads)
      .integer("seed", static_cast<long long>(s.seed))
      .number("samples_per_s", s.samples_per_s, 1)
      .number("train_seconds", s.train_seconds, 3)
      .number("test_accuracy", s.test_accuracy, 4)
      .number("test_loss", s.test_loss, 6)
      .number("final_loss", s.final_loss, 6)
      .integer("parameters", s.parameters)
      .integer("arena_bytes", size(s.arena_bytes))
      .integer("arena_lower_bound", size(s.arena_lower_bound))
      .string("device", s.device)
      .string("precision", s.precision);
  if (!s.cpu_kernels.empty()) w.string("cpu_kernels", s.cpu_kernels);
  if (!s.cpu_bf16.empty()) w.string("cpu_bf16", s.cpu_bf16);
  w.boolean("tf32", s.tf32)
      .boolean("cuda_graphs", s.cuda_graphs)
      .boolean("deterministic", s.deterministic)
      .string("optimizer", s.optimizer)
      .string("lr_schedule", s.lr_schedule)
      .number("final_lr", s.final_lr)
      .integer("memory_budget", size(s.memory_budget))
      .integer("max_rss_bytes", size(s.max_rss_bytes))
      .string("strategy", s.strategy)
      .string("strategy_used", s.strategy_used)
      .boolean("step_in_backward", s.step_in_backward)
      .integer("swapped", size(s.swapped))
      .integer("recomputed", size(s.recomputed))
      .integer("host_pool_bytes", size(s.host_pool_bytes))
      .number("predicted_step_s", s.predicted_step_s, 6)
      .number("in_memory_step_s", s.in_memory_step_s, 6)
      .number("measured_step_s", s.measured_step_s, 6);
  if (s.precision == "fp16") w.number("loss_scale", s.loss_scale).integer("skipped_steps", s.skipped_steps);
  if (s.data_parallel)
    w.integer("ranks", s.ranks)
        .integer("buckets", size(s.buckets))
        .number("allreduce_seconds", s.allreduce_seconds, 4)
        .number("allreduce_wait_seconds", s.allreduce_wait_seconds, 4);
  return w.str();
}

}  // namespace crumb
