#include "engine/run/params.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/device/backend.h"
#include "engine/base/error.h"
#include "engine/graph/rng.h"

namespace crumb {

namespace {
// Elements a parameter occupies in the block: its count rounded up to 64 bytes.
std::size_t padded_count(const Graph& g, ValueId p) {
  const std::size_t lanes = 64 / dtype_size(g.master_dtype());
  return (static_cast<std::size_t>(g.value(p).count(1)) + lanes - 1) / lanes * lanes;
}
// The state block's layout: each state value at a 64-byte aligned byte offset (-1 for other values).
std::size_t state_layout(const Graph& g, std::vector<int64_t>* offsets) {
  std::size_t bytes = 0;
  for (ValueId v : g.states()) {
    if (offsets) (*offsets)[v] = static_cast<int64_t>(bytes);
    bytes += (static_cast<std::size_t>(g.value(v).count(1)) * dtype_size(g.value(v).dtype) + 63) / 64 * 64;
  }
  return bytes;
}
}  // namespace

std::size_t ParamStore::state_block_bytes(const Graph& g) { return state_layout(g, nullptr); }

std::size_t ParamStore::block_count(const Graph& g) {
  std::size_t n = 0;
  for (ValueId p : g.params()) n += padded_count(g, p);
  return n;
}

ParamStore::ParamStore(const Graph& g, Device device, int index)
    : graph_(g),
      dtype_(g.master_dtype()),
      device_(device),
      index_(index),
      offset_(g.num_values(), -1),
      grad_owner_(g.num_values(), -1) {
  // The device must exist: an error naming it (and --device cpu) if not.
  Backend& b = backend(device, index);
  const std::vector<DType> runs = b.float_dtypes();
  if (std::find(runs.begin(), runs.end(), g.float_dtype()) == runs.end()) {
    std::string names;
    for (DType d : runs) names += std::string(names.empty() ? "" : ", ") + dtype_name(d);
    CRUMB_FAIL(device_name(device), " ", index, " (", b.description(), ") runs ", names,
               " models only, this graph is ", dtype_name(g.float_dtype()));
  }
  for (ValueId p : g.params()) {
    offset_[p] = static_cast<int64_t>(count_);
    count_ += padded_count(g, p);
    if (g.value(p).grad >= 0) grad_owner_[g.value(p).grad] = p;
  }
  copy_dtype_ = g.float_dtype();
  if (is_half(copy_dtype_)) copy_ = Buffer(count_ * dtype_size(copy_dtype_), b.memory(), index);
  data_ = MirroredBuffer(bytes(), device, index);
  if (!g.step_in_backward()) grad_ = MirroredBuffer(bytes(), device, index);
  state_offset_.assign(g.num_values(), -1);
  const std::size_t state_bytes = state_layout(g, &state_offset_);
  if (state_bytes) state_ = MirroredBuffer(state_bytes, device, index);
}

void ParamStore::init(uint64_t seed) {
  Rng rng(seed);
  for (ValueId p : graph_.params()) {
    const Value& v = graph_.value(p);
    const double bound = 1.0 / std::sqrt(static_cast<double>(v.init.fan_in));
    const int64_t n = v.count(1);
    for (int64_t i = 0; i < n; ++i) {
      double x = v.init.fill;
      if (v.init.kind == ParamInit::Kind::Uniform) {
        x = (2.0 * rng.uniform() - 1.0) * bound;
      } else if (v.init.kind == ParamInit::Kind::Normal) {  // Box-Muller; 1 - u keeps the log finite
        const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
        x = v.init.std * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
      }
      if (dtype_ == DType::F32)
        static_cast<float*>(data(p))[i] = static_cast<float>(x);
      else
        static_cast<double*>(data(p))[i] = x;
    }
  }
  for (ValueId v : graph_.states()) {
    const Value& s = graph_.value(v);
    for (int64_t i = 0; i < s.count(1); ++i) {
      if (s.dtype == DType::I64) static_cast<int64_t*>(state(v))[i] = static_cast<int64_t>(s.init.fill);
      else if (s.dtype == DType::F32) static_cast<float*>(state(v))[i] = static_cast<float>(s.init.fill);
      else static_cast<double*>(state(v))[i] = s.init.fill;
    }
  }
  to_device();
}

void ParamStore::to_device() {
  data_.to_device();
  state_.to_device();
  if (copy_.size()) backend(device_, index_).convert(copy_.data(), copy_dtype_, data_.device(), dtype_, count_);
}

void* ParamStore::device_copy(ValueId param) const {
  CRUMB_CHECK(copy_.size(), "the parameters have no 16-bit copies (a ", dtype_name(copy_dtype_), " graph)");
  return copy_.data() + byte_offset(param) / dtype_size(dtype_) * dtype_size(copy_dtype_);
}

void ParamStore::to_host() {
  data_.to_host();
  grad_.to_host();
  state_.to_host();
}

void* ParamStore::state(ValueId v) const {
  CRUMB_CHECK(v >= 0 && v < (int)state_offset_.size() && state_offset_[v] >= 0, "value ", v, " is not state");
  return state_.host() + state_offset_[v];
}

void* ParamStore::device_state(ValueId v) const {
  CRUMB_CHECK(v >= 0 && v < (int)state_offset_.size() && state_offset_[v] >= 0, "value ", v, " is not state");
  return state_.device() + state_offset_[v];
}

std::size_t ParamStore::byte_offset(ValueId param) const {
  CRUMB_CHECK(param >= 0 && param < (int)offset_.size() && offset_[param] >= 0, "value ", param, " is not a parameter");
  return static_cast<std::size_t>(offset_[param]) * dtype_size(dtype_);
}

void* ParamStore::data(ValueId param) const { return data_.host() + byte_offset(param); }
void ParamStore::check_grads() const {
  CRUMB_CHECK(!graph_.step_in_backward(), "the parameters' gradients are not kept: the optimizer steps in the backward pass, each ",
              "parameter's gradient in the arena only until its update (plan with more --memory-budget to keep them)");
}

void* ParamStore::grad(ValueId param) const {
  check_grads();
  return grad_.host() + byte_offset(param);
}
void* ParamStore::device_data(ValueId param) const { return data_.device() + byte_offset(param); }
void* ParamStore::device_grad(ValueId param) const {
  check_grads();
  return grad_.device() + byte_offset(param);
}

ValueId ParamStore::param_of_grad(ValueId grad) const {
  return grad >= 0 && grad < (int)grad_owner_.size() ? grad_owner_[grad] : -1;
}

int64_t ParamStore::num_parameters() const {
  int64_t n = 0;
  for (ValueId p : graph_.params()) n += graph_.value(p).count(1);
  return n;
}

}  // namespace crumb
