#include "engine/params.h"

#include <cmath>

#include "engine/error.h"
#include "engine/rng.h"

namespace crumb {

namespace {
// Elements a parameter occupies in the block: its count rounded up to 64 bytes.
std::size_t padded_count(const Graph& g, ValueId p) {
  const std::size_t lanes = 64 / dtype_size(g.float_dtype());
  return (static_cast<std::size_t>(g.value(p).count(1)) + lanes - 1) / lanes * lanes;
}
}  // namespace

std::size_t ParamStore::block_count(const Graph& g) {
  std::size_t n = 0;
  for (ValueId p : g.params()) n += padded_count(g, p);
  return n;
}

ParamStore::ParamStore(const Graph& g, Device device)
    : graph_(g), dtype_(g.float_dtype()), device_(device), offset_(g.num_values(), -1), grad_owner_(g.num_values(), -1) {
  CRUMB_CHECK(device == Device::CPU || dtype_ == DType::F32, "CUDA runs float32 models only, this graph is ",
              dtype_name(dtype_));
  for (ValueId p : g.params()) {
    offset_[p] = static_cast<int64_t>(count_);
    count_ += padded_count(g, p);
    if (g.value(p).grad >= 0) grad_owner_[g.value(p).grad] = p;
  }
  data_ = MirroredBuffer(bytes(), device);
  grad_ = MirroredBuffer(bytes(), device);
}

void ParamStore::init(uint64_t seed) {
  Rng rng(seed);
  for (ValueId p : graph_.params()) {
    const Value& v = graph_.value(p);
    const double bound = 1.0 / std::sqrt(static_cast<double>(v.init.fan_in));
    const int64_t n = v.count(1);
    for (int64_t i = 0; i < n; ++i) {
      const double x = (2.0 * rng.uniform() - 1.0) * bound;
      if (dtype_ == DType::F32)
        static_cast<float*>(data(p))[i] = static_cast<float>(x);
      else
        static_cast<double*>(data(p))[i] = x;
    }
  }
  to_device();
}

void ParamStore::to_host() {
  data_.to_host();
  grad_.to_host();
}

std::size_t ParamStore::byte_offset(ValueId param) const {
  CRUMB_CHECK(param >= 0 && param < (int)offset_.size() && offset_[param] >= 0, "value ", param, " is not a parameter");
  return static_cast<std::size_t>(offset_[param]) * dtype_size(dtype_);
}

void* ParamStore::data(ValueId param) const { return data_.host() + byte_offset(param); }
void* ParamStore::grad(ValueId param) const { return grad_.host() + byte_offset(param); }
void* ParamStore::device_data(ValueId param) const { return data_.device() + byte_offset(param); }
void* ParamStore::device_grad(ValueId param) const { return grad_.device() + byte_offset(param); }

ValueId ParamStore::param_of_grad(ValueId grad) const {
  return grad >= 0 && grad < (int)grad_owner_.size() ? grad_owner_[grad] : -1;
}

int64_t ParamStore::num_parameters() const {
  int64_t n = 0;
  for (ValueId p : graph_.params()) n += graph_.value(p).count(1);
  return n;
}

}  // namespace crumb
