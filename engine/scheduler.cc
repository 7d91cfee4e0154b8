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
}  // namespace

Scheduler::Scheduler(const Graph& g, ParamStore& params, Arena& arena, int micro_batch)
    : x_(require_input(g, "x")),
      y_(require_input(g, "y")),
      x_sample_bytes_(static_cast<std::size_t>(g.value(x_).count(1)) * dtype_size(g.value(x_).dtype)),
      train_(g, params, arena, micro_batch, Pass::Train),
      eval_(g, params, arena, micro_batch, Pass::Eval) {}

template <class Fn>
BatchResult Scheduler::for_each_micro_batch(Executor& e, const void* x, const int32_t* y, int batch, Fn&& run) {
  CRUMB_CHECK(batch >= 1, "batch must be >= 1, got ", batch);
  BatchResult r;
  const int m = e.max_batch();
  for (int start = 0; start < batch; start += m) {
    const int n = std::min(m, batch - start);
    e.bind(x_, static_cast<const char*>(x) + start * x_sample_bytes_);
    e.bind(y_, y + start);
    run(n, start == 0);
    r.loss_sum += e.loss_sum();
    r.correct += e.correct();
    ++r.micro_batches;
  }
  return r;
}

BatchResult Scheduler::train_batch(const void* x, const int32_t* y, int batch) {
  const double scale = 1.0 / batch;
  return for_each_micro_batch(train_, x, y, batch, [&](int n, bool first) { train_.run(n, first, scale); });
}

BatchResult Scheduler::evaluate(const void* x, const int32_t* y, int batch) {
  return for_each_micro_batch(eval_, x, y, batch, [&](int n, bool first) { eval_.run(n, first, 1.0 / batch); });
}

}  // namespace crumb
