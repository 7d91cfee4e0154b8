#include "engine/train/scheduler.h"

#include <algorithm>

#include "engine/dist/batch_share.h"
#include "engine/ops/norm.h"
#include "engine/base/error.h"
#include "engine/strategy/memory_report.h"

namespace crumb {
namespace {
// Sizes the arena for the larger pass before either executor resolves pointers into it; returns train.
CompiledPass reserve_for(Arena& arena, CompiledPass&& train, const CompiledPass& eval) {
  CRUMB_CHECK(train.pass == Pass::Train && eval.pass == Pass::Eval && train.max_batch == eval.max_batch,
              "scheduler: needs a training and an evaluation pass compiled for the same micro-batch size");
  arena.reserve(std::max(train.plan.arena_bytes, eval.plan.arena_bytes));
  return std::move(train);
}
}  // namespace

Scheduler::Scheduler(const Graph& g, ParamStore& params, Arena& arena, int micro_batch)
    : Scheduler(g, params, arena, compile_pass(g, Pass::Train, micro_batch, arena.device(), arena.index()),
                compile_pass(g, Pass::Eval, micro_batch, arena.device(), arena.index())) {}

// Whole-batch arrays handed out a micro-batch at a time: input j's micro-batch starts at its sample
// first + i * m.
class Scheduler::Slices final : public MicroBatchSource {
 public:
  explicit Slices(const std::vector<std::size_t>& sample_bytes) : sample_bytes_(sample_bytes), at_(sample_bytes.size()) {}
  void set(InputBatches inputs) {
    for (const InputBatch& in : inputs) CRUMB_CHECK(in.data, "input '", in.name, "' has no data");
    inputs_ = inputs;
  }
  std::size_t inputs() const override { return inputs_.size(); }
  const char* name(std::size_t j) const override { return inputs_.begin()[j].name; }
  void start(int first, int, int m) override {
    next_ = first;
    m_ = m;
  }
  const void* const* next() override {
    for (std::size_t j = 0; j < inputs_.size(); ++j)
      at_[j] = static_cast<const char*>(inputs_.begin()[j].data) + static_cast<std::size_t>(next_) * sample_bytes_[j];
    next_ += m_;
    return at_.data();
  }

 private:
  const std::vector<std::size_t>& sample_bytes_;  // the scheduler's source_bytes_, bound before start()
  InputBatches inputs_;
  std::vector<const void*> at_;
  int next_ = 0, m_ = 0;
};

Scheduler::Scheduler(const Graph& g, ParamStore& params, Arena& arena, CompiledPass train, CompiledPass eval)
    : g_(g),
      inputs_(g.inputs()),
      train_(g, params, arena, reserve_for(arena, std::move(train), eval)),
      eval_(g, params, arena, std::move(eval)) {
  CRUMB_CHECK(!inputs_.empty(), "scheduler: the graph has no inputs");
  std::vector<std::size_t> slot_bytes;
  for (ValueId x : inputs_) {
    sample_bytes_.push_back(static_cast<std::size_t>(g.value(x).count(1)) * dtype_size(g.value(x).dtype));
    slot_bytes.push_back(train_.max_batch() * sample_bytes_.back());
  }
  position_.assign(inputs_.size(), 0);
  source_bytes_.assign(inputs_.size(), 0);
  slices_ = std::make_unique<Slices>(source_bytes_);
  staging_ = backend(arena.device(), arena.index()).make_staging(slot_bytes);
}

Scheduler::~Scheduler() = default;

void Scheduler::bind(const MicroBatchSource& inputs) {
  // Every graph input exactly once, nothing else.
  constexpr std::size_t kUnbound = ~std::size_t{0};
  std::fill(position_.begin(), position_.end(), kUnbound);
  for (std::size_t j = 0; j < inputs.inputs(); ++j) {
    const char* name = inputs.name(j);
    std::size_t k = 0;
    while (k < inputs_.size() && g_.value(inputs_[k]).name != name) ++k;
    CRUMB_CHECK(k < inputs_.size(), "the model has no input named '", name, "'");
    CRUMB_CHECK(position_[k] == kUnbound, "input '", name, "' is given twice");
    const std::size_t given = inputs.sample_bytes(j);
    CRUMB_CHECK(given == 0 || given == sample_bytes_[k], "input '", name, "' comes in samples of ", given,
                " bytes but the model's takes ", sample_bytes_[k], " (", dims_str(g_.value(inputs_[k]).dims), " ",
                dtype_name(g_.value(inputs_[k]).dtype), "): give it in the model's dtype");
    position_[k] = j;
    source_bytes_[j] = sample_bytes_[k];
  }
  for (std::size_t k = 0; k < inputs_.size(); ++k)
    CRUMB_CHECK(position_[k] != kUnbound, "the model's input '", g_.value(inputs_[k]).name, "' was not given");
}

template <class Fn>
BatchResult Scheduler::for_each_micro_batch(Executor& e, MicroBatchSource& inputs, int first, int batch, Fn&& run) {
  CRUMB_CHECK(batch >= 1, "batch must be >= 1, got ", batch);
  bind(inputs);
  const int m = e.max_batch();
  const int count = (batch + m - 1) / m;
  auto size = [&](int i) { return std::min(m, batch - i * m); };
  inputs.start(first, batch, m);
  const void* const* data = inputs.next();
  auto at = [&](std::size_t k) { return data[position_[k]]; };
  auto copy_in = [&](int i) {
    for (std::size_t k = 0; k < inputs_.size(); ++k) staging_->copy_in(i, k, at(k), size(i) * sample_bytes_[k]);
    staging_->copied(i);
  };
  if (staging_) copy_in(0);
  for (int i = 0; i < count; ++i) {
    if (staging_) {
      if (i + 1 < count) {
        // The source reuses micro-batch i's memory for a later one once asked for the next: its copy must
        // be done. That copy waited for the compute of i - 2, so the device still has i - 1 queued.
        staging_->wait_copied(i);
        data = inputs.next();
        copy_in(i + 1);  // overlaps the compute of micro-batch i
      }
      staging_->await(i);
      for (std::size_t k = 0; k < inputs_.size(); ++k) e.bind(inputs_[k], staging_->slot(i, k));
    } else {
      if (i > 0) data = inputs.next();
      for (std::size_t k = 0; k < inputs_.size(); ++k) e.bind(inputs_[k], at(k));
    }
    run(size(i), i == 0, i == count - 1, first + i * m);
    if (staging_) staging_->release(i);
  }
  // The caller may reuse the source's memory once this returns.
  if (staging_) staging_->wait_copied(count - 1);
  const Executor::Results r = e.results();
  return {r.loss_sum, r.correct, count};
}

BatchResult Scheduler::train_batch(InputBatches inputs, int batch, uint64_t random_key, double loss_scale) {
  slices_->set(inputs);
  return train_batch(*slices_, batch, random_key, loss_scale);
}

BatchResult Scheduler::train_batch(MicroBatchSource& inputs, int batch, uint64_t random_key, double loss_scale) {
  CRUMB_CHECK(batch >= 1, "batch must be >= 1, got ", batch);
  const Communicator* comm = reducer_ ? &reducer_->communicator() : nullptr;
  const BatchShare share = comm ? batch_share(batch, comm->size(), comm->rank(), share_group_) : BatchShare{0, batch};
  if (share.size == 0) {
    reducer_->sum_zero();
    moments_->merge_and_commit(false);
    return {};
  }
  check_micro_batch(g_, train_.max_batch(), share.size);
  const double scale = loss_scale / batch;
  const BatchResult r =
      for_each_micro_batch(train_, inputs, share.offset, share.size, [&](int n, bool first, bool last, int first_sample) {
        train_.run(n, first, last, scale, RandomKey{random_key, first_sample});
      });
  if (moments_) moments_->merge_and_commit(true);
  return r;
}

void Scheduler::set_data_parallel(GradientReducer* reducer) {
  reducer_ = reducer;
  train_.set_observer(reducer);
  moments_ = reducer ? std::make_unique<MomentsMerge>(train_, reducer->communicator()) : nullptr;
  train_.set_deferred_commit(reducer != nullptr);
  share_group_ = micro_batch_multiple(g_);
}

BatchResult Scheduler::evaluate(InputBatches inputs, int batch) {
  slices_->set(inputs);
  return evaluate(*slices_, batch);
}

BatchResult Scheduler::evaluate(MicroBatchSource& inputs, int batch, const AfterChunk& after) {
  return for_each_micro_batch(eval_, inputs, 0, batch, [&](int n, bool first, bool last, int first_sample) {
    eval_.run(n, first, last, 1.0 / batch);
    if (after) after(first_sample, n);
  });
}

}  // namespace crumb
