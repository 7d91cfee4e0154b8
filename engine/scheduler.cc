#include "engine/scheduler.h"

#include <algorithm>

#include "engine/error.h"

namespace crumb {
namespace {
ValueId require_input(const Graph& g, const char* name) {
  const ValueId v = g.find_value(name);
  CRUMB_CHECK(v >= 0 && g.value(v).kind == ValueKind::Input, "the model has no input named '", name, "'");
  return v;
}

// Sizes the arena for the larger pass before either executor resolves pointers into it; returns train.
CompiledPass reserve_for(Arena& arena, CompiledPass&& train, const CompiledPass& eval) {
  CRUMB_CHECK(train.pass == Pass::Train && eval.pass == Pass::Eval && train.max_batch == eval.max_batch,
              "scheduler: needs a training and an evaluation pass compiled for the same micro-batch size");
  arena.reserve(std::max(train.plan.arena_bytes, eval.plan.arena_bytes));
  return std::move(train);
}
}  // namespace

Scheduler::Scheduler(const Graph& g, ParamStore& params, Arena& arena, int micro_batch)
    : Scheduler(g, params, arena, compile_pass(g, Pass::Train, micro_batch, arena.device()),
                compile_pass(g, Pass::Eval, micro_batch, arena.device())) {}

Scheduler::Scheduler(const Graph& g, ParamStore& params, Arena& arena, CompiledPass train, CompiledPass eval)
    : x_(require_input(g, "x")),
      y_(require_input(g, "y")),
      x_sample_bytes_(static_cast<std::size_t>(g.value(x_).count(1)) * dtype_size(g.value(x_).dtype)),
      train_(g, params, arena, reserve_for(arena, std::move(train), eval)),
      eval_(g, params, arena, std::move(eval)) {
  CRUMB_CHECK(g.value(y_).dtype == DType::I32 && g.value(y_).count(1) == 1, "input 'y' must be one int32 per sample");
  const int micro_batch = train_.max_batch();
  if (arena.device() != Device::CPU)
    staging_ = std::make_unique<InputStaging>(micro_batch * x_sample_bytes_, micro_batch * sizeof(int32_t));
}

template <class Fn>
BatchResult Scheduler::for_each_micro_batch(Executor& e, const void* x, const int32_t* y, int batch, Fn&& run) {
  CRUMB_CHECK(batch >= 1, "batch must be >= 1, got ", batch);
  const int m = e.max_batch();
  const int count = (batch + m - 1) / m;
  auto size = [&](int i) { return std::min(m, batch - i * m); };
  auto x_at = [&](int i) { return static_cast<const char*>(x) + static_cast<std::size_t>(i) * m * x_sample_bytes_; };
  auto copy_in = [&](int i) {
    staging_->copy_in(i, x_at(i), size(i) * x_sample_bytes_, y + i * m, size(i) * sizeof(int32_t));
  };
  if (staging_) copy_in(0);
  for (int i = 0; i < count; ++i) {
    if (staging_) {
      if (i + 1 < count) copy_in(i + 1);  // overlaps the compute of micro-batch i
      const auto [dx, dy] = staging_->await(i);
      e.bind(x_, dx);
      e.bind(y_, dy);
    } else {
      e.bind(x_, x_at(i));
      e.bind(y_, y + i * m);
    }
    run(size(i), i == 0);
    if (staging_) staging_->release(i);
  }
  const Executor::Results r = e.results();
  return {r.loss_sum, r.correct, count};
}

BatchResult Scheduler::train_batch(const void* x, const int32_t* y, int batch) {
  const double scale = 1.0 / batch;
  return for_each_micro_batch(train_, x, y, batch, [&](int n, bool first) { train_.run(n, first, scale); });
}

BatchResult Scheduler::evaluate(const void* x, const int32_t* y, int batch) {
  return for_each_micro_batch(eval_, x, y, batch, [&](int n, bool first) { eval_.run(n, first, 1.0 / batch); });
}

}  // namespace crumb
