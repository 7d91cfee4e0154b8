// Persistent memory of a model: every parameter and its gradient, each in one contiguous block (so
// the optimizer makes one pass over all parameters). Offsets are 64-byte aligned; the padding between
// parameters stays zero and is inert under the optimizer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/graph.h"

namespace crumb {

class ParamStore {
 public:
  explicit ParamStore(const Graph& g);
  // Elements of one block (parameters plus alignment padding) for g, without allocating it.
  static std::size_t block_count(const Graph& g);
  // PyTorch's default init for Linear/Conv2d: uniform in +-1/sqrt(fan_in), drawn in parameter order
  // from a generator seeded with `seed`.
  void init(uint64_t seed);

  void* data(ValueId param) const;
  void* grad(ValueId param) const;
  // The parameter a ParamGrad value belongs to (-1 if none).
  ValueId param_of_grad(ValueId grad) const;
  const std::vector<ValueId>& params() const { return graph_.params(); }
  const Graph& graph() const { return graph_; }
  DType dtype() const { return dtype_; }
  // Whole blocks, padding included (count() elements each).
  void* data_block() const { return data_.data(); }
  void* grad_block() const { return grad_.data(); }
  std::size_t count() const { return count_; }
  std::size_t bytes() const { return count_ * dtype_size(dtype_); }
  int64_t num_parameters() const;  // without padding

 private:
  const Graph& graph_;
  DType dtype_;
  std::vector<int64_t> offset_;  // per value id: element offset, -1 if not a parameter
  std::vector<ValueId> grad_owner_;
  std::size_t count_ = 0;
  AlignedBuffer data_, grad_;
};

}  // namespace crumb
