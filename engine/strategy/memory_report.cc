#include "engine/strategy/memory_report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "engine/device/backend.h"
#include "engine/base/error.h"
#include "engine/run/executor.h"
#include "engine/graph/op.h"
#include "engine/run/params.h"
#include "engine/ops/norm.h"

namespace crumb {

MemoryBreakdown measure_memory(const Graph& g, const CompiledPass& train, const CompiledPass& eval,
                               const OptimizerConfig& opt) {
  CRUMB_CHECK(train.pass == Pass::Train && eval.pass == Pass::Eval && train.max_batch == eval.max_batch &&
                  train.device == eval.device && train.index == eval.index,
              "measure_memory: needs a training and an evaluation pass compiled alike");
  const int m = train.max_batch;
  MemoryBreakdown mb;
  mb.micro_batch = m;
  mb.float_dtype = g.float_dtype();
  mb.master_dtype = g.master_dtype();
  const std::size_t count = ParamStore::block_count(g), persistent = count * dtype_size(mb.master_dtype);
  mb.params = persistent;
  mb.grads_in_arena = g.step_in_backward();
  mb.grads = mb.grads_in_arena ? 0 : persistent;
  if (is_half(mb.float_dtype)) mb.param_copies = count * dtype_size(mb.float_dtype);
  mb.state = ParamStore::state_block_bytes(g);
  const std::vector<std::string> state = state_names(opt);
  mb.optimizer_state = state.size() * persistent;
  mb.optimizer = optimizer_name(opt.kind);
  for (std::size_t i = 0; i < state.size(); ++i) mb.optimizer += (i ? " + " : ": ") + state[i];
  mb.activations = train.plan.peak_live;
  mb.workspace = train.plan.workspace_bytes;
  mb.arena = std::max(train.plan.arena_bytes, eval.plan.arena_bytes);
  mb.host_pool = train.plan.host_pool_bytes;
  const Backend& b = backend(train.device, train.index);
  // Double-buffered device slots (engine/device/staging.h), where inputs are copied from host memory; a
  // device that computes in host memory (the CPU) reads the loader's buffers in place.
  if (b.host_memory() != b.memory())
    for (ValueId x : g.inputs()) mb.staging += 2 * align_up(g.value(x).count(m) * dtype_size(g.value(x).dtype));
  mb.runtime = b.runtime_bytes();
  return mb;
}

MicroBatchPlan plan_micro_batch(const Graph& g, int m, const OptimizerConfig& opt, Device device, int index) {
  MicroBatchPlan p;
  p.micro_batch = m;
  p.train = compile_pass(g, Pass::Train, m, device, index);
  p.eval = compile_pass(g, Pass::Eval, m, device, index);
  p.memory = measure_memory(g, p.train, p.eval, opt);
  return p;
}

MemoryBreakdown measure_memory(const Graph& g, int m, const OptimizerConfig& opt, Device device, int index, int batch) {
  if (g.step_in_backward() && m < batch) {
    // Several micro-batches accumulate into kept gradients: that graph's memory, not this one's.
    Graph kept = g;
    kept.set_step_in_backward(false);
    return measure_memory(kept, m, opt, device, index, batch);
  }
  MicroBatchPlan p = plan_micro_batch(g, m, opt, device, index);
  if (batch > 0) count_loader(g, batch, p);
  return p.memory;
}

void count_loader(const Graph& g, int batch, MicroBatchPlan& plan) {
  plan.memory.loader = 0;
  const Backend& b = backend(plan.train.device, plan.train.index);
  if (b.host_memory() != b.memory()) return;  // host memory (pinned on CUDA), outside a device budget
  for (ValueId x : g.inputs()) {
    const std::size_t sample = static_cast<std::size_t>(g.value(x).count(1)) * dtype_size(g.value(x).dtype);
    plan.memory.loader += 2 * sample * (static_cast<std::size_t>(std::min(batch, plan.micro_batch)) + plan.micro_batch);
  }
}

MicroBatchPlan choose_micro_batch(const Graph& g, int batch, std::size_t budget, const OptimizerConfig& opt,
                                  Device device, int index) {
  CRUMB_CHECK(batch >= 1, "batch must be >= 1, got ", batch);
  // Candidates are m(k) = min(k * q, batch): whole BatchNorm groups (q = 1 without BatchNorm), or only the
  // whole batch when a layer normalises over it.
  const int multiple = micro_batch_multiple(g);
  const int q = multiple == 0 ? batch : multiple;
  auto m_of = [&](int k) { return static_cast<int>(std::min<int64_t>(int64_t{k} * q, batch)); };
  MicroBatchPlan best = plan_micro_batch(g, m_of(1), opt, device, index);
  count_loader(g, batch, best);
  const MemoryBreakdown& one = best.memory;
  const std::string smallest = q == 1                      ? "micro-batch 1"
                               : multiple == 0 ? "the whole batch of " + std::to_string(batch) +
                                                                   " as one micro-batch (BatchNorm over the batch: "
                                                                   "--bn-group batch; a smaller --bn-group or "
                                                                   "--norm gn lifts this)"
                                                             : "micro-batch " + std::to_string(m_of(1)) +
                                                                   " (one BatchNorm group, --bn-group)";
  CRUMB_CHECK(one.total() <= budget, "memory budget ", format_bytes(budget), " cannot hold the model even at ",
              smallest, ": it needs at least ", format_bytes(one.total()), " (persistent ",
              format_bytes(one.persistent()), " + arena ", format_bytes(one.arena), " + staging ",
              format_bytes(one.staging), " + runtime ", format_bytes(one.runtime), " + loader buffers ",
              format_bytes(one.loader), ")", persistent_note(g, one, budget), "; raise --memory-budget");
  // Memory is monotone in m: binary search for the largest k whose m(k) fits, keeping its compiled passes.
  int lo = 1, hi = (batch + q - 1) / q;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    MicroBatchPlan candidate = plan_micro_batch(g, m_of(mid), opt, device, index);
    count_loader(g, batch, candidate);
    if (candidate.memory.total() <= budget) {
      lo = mid;
      best = std::move(candidate);
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

std::string persistent_note(const Graph& g, const MemoryBreakdown& mb, std::size_t budget) {
  if (mb.persistent() <= budget || g.params().empty()) return "";
  ValueId largest = g.params().front();
  for (ValueId p : g.params())
    if (g.value(p).count(1) > g.value(largest).count(1)) largest = p;
  const Value& p = g.value(largest);
  const std::size_t bytes = static_cast<std::size_t>(p.count(1)) * dtype_size(mb.master_dtype);
  return detail::concat("; the persistent state alone (parameters, ", mb.grads_in_arena ? "" : "gradients, ",
                        "optimizer state), which no micro-batch size or strategy lowers, needs ",
                        format_bytes(mb.persistent()), ": the largest parameter is '",
                        p.name, "' ", dims_str(p.dims), " (", format_bytes(bytes),
                        " a copy): make that layer smaller (fewer classes or features, a smaller input)");
}

void check_micro_batch(const Graph& g, int m, int batch) {
  CRUMB_CHECK(m >= 1 && batch >= 1, "micro-batch and batch must be >= 1, got ", m, " and ", batch);
  if (m >= batch) return;
  CRUMB_CHECK(!g.step_in_backward(), "the plan has the optimizer step in the backward pass, for batches of up to ", m,
              " samples (each one micro-batch), but this batch has ", batch,
              ": plan for the larger batch (a new Trainer or train run), or raise --memory-budget");
  const int q = micro_batch_multiple(g);
  CRUMB_CHECK(q != 0, "BatchNorm over the whole batch (--bn-group batch) needs the batch of ", batch,
              " as one micro-batch, but micro-batches hold ", m,
              " samples (use --bn-group G for groups of G samples, --norm gn, or a larger --memory-budget)");
  const std::string nearest =
      m < q ? std::to_string(q) : std::to_string(q * (m / q)) + " or " + std::to_string(q * (m / q + 1));
  CRUMB_CHECK(m % q == 0, "micro-batch ", m, " is not a multiple of the BatchNorm group of ", q,
              " samples (--bn-group): micro-batches must hold whole groups (use ", nearest, ")");
}

std::string format_bytes(std::size_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  if (bytes >= (1ull << 30)) os << bytes / double(1ull << 30) << " GiB";
  else if (bytes >= (1ull << 20)) os << bytes / double(1ull << 20) << " MiB";
  else if (bytes >= (1ull << 10)) os << bytes / double(1ull << 10) << " KiB";
  else os << std::setprecision(0) << double(bytes) << " B";
  return os.str();
}

std::size_t parse_bytes(const std::string& text) {
  // Digits with at most one decimal point, then the unit: no sign, spaces, exponent, hex or inf, which
  // strtod alone would take.
  const std::size_t digits = text.find_first_not_of("0123456789.");
  const std::string number = text.substr(0, digits);
  CRUMB_CHECK(!number.empty() && number.front() != '.' && number.back() != '.' &&
                  number.find('.') == number.rfind('.'),
              "'", text, "' is not a size (examples: 64MiB, 1.5GiB, 500MB, 4096)");
  errno = 0;
  const double v = std::strtod(number.c_str(), nullptr);
  CRUMB_CHECK(errno == 0 && std::isfinite(v) && v > 0, "'", text, "' is not a size (examples: 64MiB, 1.5GiB, 500MB, 4096)");
  const std::string unit = digits == std::string::npos ? "" : text.substr(digits);
  double mult = 0;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KiB") mult = 1024.0;
  else if (unit == "M" || unit == "MiB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  CRUMB_CHECK(mult > 0, "'", text, "': unknown unit '", unit, "' (use B, KiB, MiB, GiB, KB, MB or GB)");
  const double bytes = v * mult;
  CRUMB_CHECK(bytes >= 1 && bytes < 1.8e19, "'", text, "' is out of range");
  return static_cast<std::size_t>(bytes);
}

std::vector<BreakdownRow> breakdown_rows(const MemoryBreakdown& mb, std::size_t budget) {
  const std::string master = dtype_name(mb.master_dtype), compute = dtype_name(mb.float_dtype);
  const bool mixed = mb.param_copies > 0;
  std::vector<BreakdownRow> rows = {{"parameters", mb.params, master, mixed ? "master weights" : ""}};
  if (mixed)
    rows.push_back({"parameter copies", mb.param_copies, compute, "what 16-bit ops read; the optimizer writes them"});
  rows.push_back({"gradients", mb.grads, master,
                  mb.grads_in_arena ? "in the arena: the optimizer steps in the backward pass" : ""});
  rows.push_back({"optimizer state", mb.optimizer_state, master, mb.optimizer});
  if (mb.state) rows.push_back({"non-trained state", mb.state, master, "running statistics, I64 counters"});
  rows.push_back({"arena (block)", mb.arena, compute, ""});
  rows.push_back({"  peak live activations (train)", mb.activations, compute, ""});
  rows.push_back({"  largest step workspace (train)", mb.workspace, "",
                  mixed ? "kernel scratch, float32 copies of 16-bit operands" : ""});
  if (mb.staging) rows.push_back({"input staging (device slots)", mb.staging, "", ""});
  if (mb.loader) rows.push_back({"loader buffers (host)", mb.loader, "", "2 training + 2 evaluation micro-batches"});
  if (mb.runtime) rows.push_back({"runtime (cuBLAS workspace)", mb.runtime, "", ""});
  rows.push_back({"total", mb.total(), "", ""});
  if (budget) rows.push_back({"budget", budget, "", ""});
  if (mb.host_pool)
    rows.push_back({"host pool (not in the total)", mb.host_pool, compute, "swapped activations, pinned host memory"});
  return rows;
}

const char* precision_of(const Graph& g) {
  switch (g.float_dtype()) {
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
    case DType::F64: return "fp64";
    default: return g.tf32() ? "tf32" : "fp32";
  }
}

std::string output_dtypes(const Graph& g, const Node& n) {
  std::string out;
  std::vector<DType> seen;
  for (ValueId v : n.out) {
    const DType t = g.value(v).dtype;
    if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
    seen.push_back(t);
    out += (out.empty() ? "" : "/") + std::string(dtype_name(t));
  }
  return out;
}

void write_memory_report(std::ostream& os, const Graph& g, const MemoryBreakdown& mb, const MemoryPlan& plan,
                         std::size_t budget) {
  os << "memory for micro-batch " << mb.micro_batch << " in " << precision_of(g);
  if (mb.float_dtype != mb.master_dtype)
    os << " (" << dtype_name(mb.float_dtype) << " activations; " << dtype_name(mb.master_dtype)
       << " master weights, gradients and optimizer state)";
  os << ":\n";
  for (const BreakdownRow& row : breakdown_rows(mb, budget)) {
    os << "  " << std::left << std::setw(34) << row.label << std::right << std::setw(12) << format_bytes(row.bytes);
    // The dtype column, padded only where a note follows it (no trailing blanks).
    if (!row.note.empty())
      os << "  " << std::left << std::setw(5) << row.dtype << std::right << "  (" << row.note << ")";
    else if (!row.dtype.empty())
      os << "  " << row.dtype;
    os << "\n";
  }
  os << "arena plan (training): " << format_bytes(plan.arena_bytes) << " for a lower bound of "
     << format_bytes(plan.lower_bound) << " (max over steps of live + workspace bytes; ratio " << std::fixed
     << std::setprecision(3) << plan.ratio() << ")\n";
  os << "\n step  pass      layer                          op                                live       workspace"
        "  dtype\n";
  for (size_t s = 0; s < plan.order.size(); ++s) {
    const Node& n = g.node(plan.order[s]);
    os << std::setw(5) << s << "  " << std::left << std::setw(9) << (n.backward ? "backward" : "forward") << " "
       << std::setw(30) << n.name << " " << std::setw(32) << n.def->name << std::right << std::setw(12)
       << format_bytes(plan.live_bytes[s]) << std::setw(12) << format_bytes(plan.step_workspace[s]) << "  "
       << output_dtypes(g, n) << "\n";
  }
}

void write_timeline_csv(std::ostream& os, const Graph& g, const MemoryPlan& plan) {
  os << "step,pass,layer,op,live_bytes,workspace_bytes,dtype\n";
  for (size_t s = 0; s < plan.order.size(); ++s) {
    const Node& n = g.node(plan.order[s]);
    os << s << ',' << (n.backward ? "backward" : "forward") << ",\"" << n.name << "\"," << n.def->name << ','
       << plan.live_bytes[s] << ',' << plan.step_workspace[s] << ',' << output_dtypes(g, n) << '\n';
  }
}

}  // namespace crumb
