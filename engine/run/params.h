// Persistent memory of a model: every parameter and its gradient, each in one contiguous block (so
// the optimizer makes one pass over all parameters), and the non-trained state (ValueKind::State) in a
// third block of its own, which the optimizer never sees. Offsets are 64-byte aligned; the padding between
// parameters stays zero and is inert under the optimizer. The blocks live on the device that trains;
// data()/grad() address the host copy (initialisation, checkpoints, inspection), which on CUDA is
// brought up to date by to_host() and pushed back by to_device().
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/device/buffer.h"
#include "engine/graph/graph.h"

namespace crumb {

class ParamStore {
 public:
  // On device `index` of its kind (the CPU is device 0).
  explicit ParamStore(const Graph& g, Device device = Device::CPU, int index = 0);
  // Elements of one block (parameters plus alignment padding) for g, without allocating it.
  static std::size_t block_count(const Graph& g);
  // PyTorch's default init for Linear/Conv2d: uniform in +-1/sqrt(fan_in), drawn in parameter order
  // from a generator seeded with `seed`; every state value at its fill value. Written to the device too.
  void init(uint64_t seed);

  // Host copies.
  void* data(ValueId param) const;
  void* grad(ValueId param) const;
  // Where the device computes on them (the host copies on the CPU).
  void* device_data(ValueId param) const;
  void* device_grad(ValueId param) const;
  Device device() const { return device_; }
  int index() const { return index_; }
  // Non-trained state: host copy, where the device computes on it, its bytes (values 64-byte aligned).
  void* state(ValueId v) const;
  void* device_state(ValueId v) const;
  std::size_t state_bytes() const { return state_.size(); }
  // Bytes of the state block for g, without allocating it.
  static std::size_t state_block_bytes(const Graph& g);
  // Host copies -> device (parameters and state), device -> host copies (parameters, gradients, state).
  void to_device() {
    data_.to_device();
    state_.to_device();
  }
  void to_host();
  // The parameter a ParamGrad value belongs to (-1 if none).
  ValueId param_of_grad(ValueId grad) const;
  const std::vector<ValueId>& params() const { return graph_.params(); }
  const Graph& graph() const { return graph_; }
  DType dtype() const { return dtype_; }
  // Whole blocks, padding included (count() elements each): host copies and device blocks.
  void* data_block() const { return data_.host(); }
  void* grad_block() const { return grad_.host(); }
  void* device_data_block() const { return data_.device(); }
  void* device_grad_block() const { return grad_.device(); }
  std::size_t count() const { return count_; }
  std::size_t bytes() const { return count_ * dtype_size(dtype_); }
  int64_t num_parameters() const;  // without padding
  // Byte offset of a parameter in either block (and in any block of the same layout, such as momentum).
  std::size_t byte_offset(ValueId param) const;

 private:
  const Graph& graph_;
  DType dtype_;
  Device device_;
  int index_;
  std::vector<int64_t> offset_;  // per value id: element offset, -1 if not a parameter
  std::vector<ValueId> grad_owner_;
  std::size_t count_ = 0;
  std::vector<int64_t> state_offset_;  // per value id: byte offset in the state block, -1 if not state
  MirroredBuffer data_, grad_, state_;
};

}  // namespace crumb
