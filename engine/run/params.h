// Persistent memory of a model: every parameter and its gradient, each in one contiguous block (so
// the optimizer makes one pass over all parameters), and the non-trained state (ValueKind::State) in a
// third block of its own, which the optimizer never sees. Offsets are 64-byte aligned; the padding between
// parameters stays zero and is inert under the optimizer. The blocks live on the device that trains;
// data()/grad() address the host copy (initialisation, checkpoints, inspection), which on CUDA is
// brought up to date by to_host() and pushed back by to_device().
// In a mixed-precision graph (16-bit float dtype) the blocks hold the float32 master weights and their
// float32 gradients, and a fourth block, of the parameter block's layout in the 16-bit dtype, the copies
// that 16-bit ops read (the parameters whose Value dtype is 16-bit): to_device() writes them from the
// masters, and so does the optimizer in its pass.
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

  // Host copies. A graph whose optimizer steps in the backward pass (Graph::step_in_backward) keeps no
  // gradient block: grad(), device_grad() and the grad blocks throw, naming why.
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
  void to_device();
  void to_host();
  // The parameter a ParamGrad value belongs to (-1 if none).
  ValueId param_of_grad(ValueId grad) const;
  const std::vector<ValueId>& params() const { return graph_.params(); }
  const Graph& graph() const { return graph_; }
  // The dtype of the parameter, gradient and state blocks (the graph's master dtype).
  DType dtype() const { return dtype_; }
  // The 16-bit copies (in the device's memory; null in a graph without them), their dtype, and where
  // the copy of one parameter is.
  void* device_copy_block() const { return copy_.data(); }
  DType copy_dtype() const { return copy_dtype_; }
  void* device_copy(ValueId param) const;
  // Whole blocks, padding included (count() elements each): host copies and device blocks.
  void* data_block() const { return data_.host(); }
  void* grad_block() const { return check_grads(), grad_.host(); }
  void* device_data_block() const { return data_.device(); }
  void* device_grad_block() const { return check_grads(), grad_.device(); }
  std::size_t count() const { return count_; }
  std::size_t bytes() const { return count_ * dtype_size(dtype_); }
  int64_t num_parameters() const;  // without padding
  // Byte offset of a parameter in either block (and in any block of the same layout, such as momentum).
  std::size_t byte_offset(ValueId param) const;

 private:
  void check_grads() const;

  const Graph& graph_;
  DType dtype_;
  Device device_;
  int index_;
  std::vector<int64_t> offset_;  // per value id: element offset, -1 if not a parameter
  std::vector<ValueId> grad_owner_;
  std::size_t count_ = 0;
  std::vector<int64_t> state_offset_;  // per value id: byte offset in the state block, -1 if not state
  MirroredBuffer data_, grad_, state_;
  DType copy_dtype_;
  Buffer copy_;
};

}  // namespace crumb
