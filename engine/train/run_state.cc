// Where a run stands, kept across processes: what a checkpoint records of it (Trainer::save), what a
// resumed run reads back (continue_run) and what a failure saves (after_failure). Part of the Trainer
// (engine/train/trainer.h).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/ops/conv2d_algo.h"
#include "engine/train/network.h"
#include "engine/train/trainer.h"

namespace crumb {
namespace {

// v, recorded as `key`, as a count of at most max_digits digits (a leading '-' where negative ones are allowed).
long long count_of(const std::string& v, const std::string& key, const std::string& path, std::size_t max_digits,
                   bool negative = false) {
  const std::size_t sign = negative && !v.empty() && v[0] == '-' ? 1 : 0;
  CRUMB_CHECK(v.size() > sign && v.size() <= max_digits + sign && v.find_first_not_of("0123456789", sign) == std::string::npos,
              path, ": \"", key, "\" is \"", v, "\", not a count");
  return std::stoll(v);
}

int metadata_int(const CheckpointMetadata& meta, const std::string& key, const std::string& path) {
  return static_cast<int>(count_of(recorded_value(meta, key, path), key, path, 9));
}

// A recorded value that files written before it was recorded lack: `fallback` then.
long long metadata_count_or(const CheckpointMetadata& meta, const std::string& key, const std::string& path,
                            long long fallback, bool negative = false) {
  for (const auto& [k, v] : meta)
    if (k == key) return count_of(v, key, path, 18, negative);
  return fallback;
}

double metadata_double_or(const CheckpointMetadata& meta, const std::string& key, const std::string& path,
                          double fallback) {
  for (const auto& [k, v] : meta) {
    if (k != key) continue;
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    CRUMB_CHECK(!v.empty() && end == v.c_str() + v.size() && std::isfinite(x), path, ": \"", key, "\" is \"", v,
                "\", not a finite number");
    return x;
  }
  return fallback;
}

// Exact decimal text of floats, comma-separated (what the data keys of a checkpoint record).
std::string floats_text(const std::vector<float>& v) {
  std::string out;
  char buf[32];
  for (float f : v) {
    std::snprintf(buf, sizeof buf, "%.9g", f);
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  return out;
}

}  // namespace

// A resumed run continues the same run: its schedule ends where the uninterrupted one would.
void Trainer::continue_run(long long run_steps) {
  if (!cfg_.resume.empty()) {
    // Everything is checked before anything is loaded or written: a resume that cannot continue the run
    // leaves its checkpoint as it was.
    const CheckpointMetadata meta = checkpoint_metadata(cfg_.resume);
    start_epoch_ = metadata_int(meta, "train.epoch", cfg_.resume);
    start_batch_ = metadata_int(meta, "train.batch", cfg_.resume);
    const bool finished = start_batch_ == 0 && start_epoch_ == cfg_.epochs;
    CRUMB_CHECK(!finished, cfg_.resume, " finished its ", start_epoch_,
                " epoch(s): give --epochs above that to train on (the checkpoint is unchanged)");
    CRUMB_CHECK(cfg_.epochs > start_epoch_, cfg_.resume, " has trained ", start_epoch_, " epoch(s)",
                start_batch_ ? " and " + std::to_string(start_batch_) + " batch(es)" : std::string(), ": --epochs ",
                cfg_.epochs, " would move it backwards; give --epochs above ", start_epoch_,
                " (the checkpoint is unchanged)");
    CRUMB_CHECK(has_optimizer_file(cfg_.resume) || cfg_.fresh_optimizer, optimizer_path(cfg_.resume),
                " is missing: it holds the run's optimizer state and step count, without which the momentum and ",
                "the learning-rate schedule would start over; put it back, or pass --fresh-optimizer to resume ",
                "with a new optimizer");
    load_checkpoint(cfg_.resume, *params_, cfg_.fresh_optimizer ? nullptr : opt_.get());
    if (scaler_.enabled())
      scaler_.restore(std::ldexp(1.0, metadata_int(meta, "train.loss_scale_exponent", cfg_.resume)),
                      metadata_int(meta, "train.loss_scale_clean_steps", cfg_.resume),
                      metadata_int(meta, "train.skipped_steps", cfg_.resume));
    CRUMB_CHECK(start_batch_ <= batches_per_epoch() || data_->train.count == 0, cfg_.resume, " stopped at batch ", start_batch_,
                " of an epoch, but this data has ", batches_per_epoch(), " batches per epoch");
    const int threads = metadata_int(meta, "train.threads", cfg_.resume);
    const int saved_m = metadata_int(meta, "train.micro_batch", cfg_.resume);
    const int m = micro_batch();
    if (threads != cfg_.threads || saved_m != m)
      warnings_.push_back("the run used " + std::to_string(threads) + " threads and micro-batches of " +
                          std::to_string(saved_m) + ", this one " + std::to_string(cfg_.threads) + " and " +
                          std::to_string(m) +
                          ": it continues exactly, but float rounding will differ from an uninterrupted run");
    // The schedule's horizon is the run's: its epochs' steps after those it started from (a --load's, or
    // earlier fits' of the Python module), which the checkpoint records.
    opt_->set_total_steps(metadata_count_or(meta, "train.schedule_offset", cfg_.resume, 0, true) + run_steps);
    // The epoch it stopped in goes on from its totals so far: its loss and accuracy are the whole epoch's.
    if (start_batch_) {
      epoch_so_far_.loss_sum = metadata_double_or(meta, "train.epoch_loss_sum", cfg_.resume, 0);
      epoch_so_far_.samples = metadata_count_or(meta, "train.epoch_samples", cfg_.resume, 0);
      epoch_so_far_.correct = metadata_count_or(meta, "train.epoch_correct", cfg_.resume, 0);
    }
  } else {
    opt_->set_total_steps(opt_->steps() + run_steps);
  }
}

void Trainer::save_at(int epoch, int batch, const std::string& path) {
  const std::string target = path.empty() ? cfg_.save : path;
  CheckpointMetadata meta = cfg_.record;
  meta.insert(meta.end(), {{"train.epoch", std::to_string(epoch)},
                           {"train.batch", std::to_string(batch)},
                           {"train.threads", std::to_string(cfg_.threads)},
                           {"train.micro_batch", std::to_string(micro_batch())},
                           {"train.schedule_offset",
                            std::to_string(opt_->config().schedule.total_steps -
                                           static_cast<long long>(cfg_.epochs) * batches_per_epoch())}});
  if (batch) {
    char sum[32];
    std::snprintf(sum, sizeof sum, "%.17g", epoch_so_far_.loss_sum);
    meta.insert(meta.end(), {{"train.epoch_loss_sum", sum},
                             {"train.epoch_samples", std::to_string(epoch_so_far_.samples)},
                             {"train.epoch_correct", std::to_string(epoch_so_far_.correct)}});
  }
  if (scaler_.enabled()) {
    // The scale is a power of two: its exponent is a count, read back as strictly as the others.
    int exponent = 0;
    std::frexp(scaler_.scale(), &exponent);
    meta.insert(meta.end(), {{"train.loss_scale_exponent", std::to_string(exponent - 1)},
                             {"train.loss_scale_clean_steps", std::to_string(scaler_.clean_steps())},
                             {"train.skipped_steps", std::to_string(scaler_.skipped())}});
  }
  if (const std::string choices = conv_choices_text(plan_.graph); !choices.empty())
    meta.push_back({kConvChoicesKey, choices});
  if (!cfg_.network.empty())
    meta.push_back({"train.network", network_json(parse_network(cfg_.network, "the network description"))});
  const data::Dataset& t = data_->train;
  meta.insert(meta.end(),
              {{kDataShapeKey, std::to_string(t.channels) + "x" + std::to_string(t.height) + "x" + std::to_string(t.width)},
               {kDataClassesKey, std::to_string(t.num_classes)},
               {kDataPixelsKey, t.pixel_type() == data::PixelType::F32 ? "float32" : "uint8"},
               {kDataMeanKey, floats_text(data_->norm.mean)},
               {kDataStdKey, floats_text(data_->norm.std)}});
  try {
    save_checkpoint_or_rescue(target, *params_, opt_.get(), cfg_.model, meta);
  } catch (...) {
    save_failed_ = true;
    throw;
  }
  if (target == cfg_.save) {
    saved_epoch_ = epoch;
    saved_batch_ = batch;
  }
}

std::string Trainer::after_failure() {
  // A divergence says itself that nothing was saved; a failed save where the weights went.
  if (!lead() || diverged_ || save_failed_) return "";
  if (stepping_)
    return "; nothing was saved: the failure came during an optimizer step, so the weights are not a step's";
  if (cfg_.save.empty()) return "; nothing was saved (no --save)";
  const std::string step = "the last optimizer step (" + std::to_string(opt_->steps()) + ")";
  if (saved_epoch_ == at_epoch_ && saved_batch_ == at_batch_)
    return "; " + cfg_.save + " holds " + step + ": --resume " + cfg_.save + " continues the run";
  try {
    save();
  } catch (const Error& e) {
    return std::string("; saving ") + step + " failed: " + e.what();
  }
  return "; saved " + step + " in " + cfg_.save + ": --resume " + cfg_.save + " continues the run";
}

namespace {
// Parameters are held in the master dtype; state values in their own.
DType dtype_of(const ParamStore& p, ValueId v) {
  return p.graph().value(v).kind == ValueKind::Param ? p.dtype() : p.graph().value(v).dtype;
}
}  // namespace

std::vector<NamedTensor> Trainer::state_dict() {
  CRUMB_CHECK(prepared(), "state_dict: the run is not prepared");
  ParamStore& p = *params_;
  p.to_host();
  const Graph& g = p.graph();
  std::vector<NamedTensor> out;
  for (ValueId v : g.params()) out.push_back({g.value(v).name, dtype_of(p, v), g.value(v).dims, p.data(v)});
  for (ValueId v : g.states()) out.push_back({g.value(v).name, dtype_of(p, v), g.value(v).dims, p.state(v)});
  return out;
}

void copy_state_dict(const std::vector<NamedTensor>& tensors, ParamStore& p) {
  const Graph& g = p.graph();
  std::vector<bool> seen(g.num_values(), false);
  for (const NamedTensor& t : tensors) {
    const ValueId v = g.find_value(t.name);
    const bool param = v >= 0 && g.value(v).kind == ValueKind::Param;
    CRUMB_CHECK(param || (v >= 0 && g.value(v).kind == ValueKind::State), "load_state_dict: the model has no '",
                t.name, "'");
    const Value& value = g.value(v);
    CRUMB_CHECK(t.dims == value.dims, "load_state_dict: '", t.name, "' has shape ", dims_str(t.dims),
                " but the model's is ", dims_str(value.dims));
    CRUMB_CHECK(t.dtype == dtype_of(p, v), "load_state_dict: '", t.name, "' is ", dtype_name(t.dtype),
                " but the model's is ", dtype_name(dtype_of(p, v)));
    CRUMB_CHECK(!seen[v], "load_state_dict: '", t.name, "' is given twice");
    seen[v] = true;
  }
  for (ValueId v : g.params()) CRUMB_CHECK(seen[v], "load_state_dict: '", g.value(v).name, "' is missing");
  for (ValueId v : g.states()) CRUMB_CHECK(seen[v], "load_state_dict: '", g.value(v).name, "' is missing");
  for (const NamedTensor& t : tensors) {
    const ValueId v = g.find_value(t.name);
    std::memcpy(g.value(v).kind == ValueKind::Param ? p.data(v) : p.state(v), t.data,
                static_cast<std::size_t>(g.value(v).count(1)) * dtype_size(dtype_of(p, v)));
  }
}

void Trainer::load_state_dict(const std::vector<NamedTensor>& tensors) {
  CRUMB_CHECK(prepared(), "load_state_dict: the run is not prepared");
  params_->to_host();
  copy_state_dict(tensors, *params_);
  params_->to_device();
}

}  // namespace crumb
