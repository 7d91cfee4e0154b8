// What the engine asks of a device beyond memory (engine/buffer.h): an implementation of each op for a
// compiled plan, and the few runtime calls the executor makes around a run. On the CPU everything
// happens on the calling thread; on CUDA work is enqueued on one compute stream (engine/cuda/context.h)
// and these functions are the only places that wait for it.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/graph.h"
#include "engine/ops/op.h"

namespace crumb {

// One node compiled for a device and a largest micro-batch.
struct CompiledStep {
  StepFn fn = nullptr;            // null for views (no computation)
  std::unique_ptr<OpState> state;  // per-node state, if the implementation needs one
  std::size_t workspace = 0;       // scratch bytes at the largest micro-batch
};

// Throws crumb::Error when the device has no implementation of the op for the graph's dtype, or the
// build or machine has no such device.
CompiledStep compile_step(Device device, const Graph& g, const Node& n, int max_batch);

// Whether the device can run: always for the CPU; for CUDA, a CUDA build on a machine with a usable GPU.
bool device_available(Device device);
// One line naming the device and the libraries that serve it, for logs (CUDA: the GPU, its compute
// capability and memory, the driver's CUDA version, cuDNN and cuBLAS as loaded at run time).
std::string device_description(Device device);
// Bytes of device memory free now (CUDA); 0 for the CPU, whose budget has no natural default.
std::size_t device_free_bytes(Device device);
// Persistent device memory the runtime holds besides the model (cuBLAS's workspace on CUDA).
std::size_t runtime_bytes(Device device);

// Device work recorded once and replayed as a whole (on CUDA, a graph of everything one executor run
// enqueues on the compute stream, launched with one call instead of one per kernel).
class Recording {
 public:
  virtual ~Recording() = default;
  // Enqueues the recorded work on the device's compute stream, as `enqueue` would have.
  virtual void replay() = 0;
};
// Records what `enqueue` puts on the device's compute stream without running any of it. Null where the
// device cannot record (the CPU) or the work could not be captured (a library call that refuses capture):
// then nothing ran, and the caller runs `enqueue` itself. An error thrown by `enqueue` ends the recording
// and propagates.
std::unique_ptr<Recording> record(Device device, const std::function<void()>& enqueue);

// Zero `bytes` at p, in order with the steps that follow (p in the device's memory).
void zero_in_order(Device device, void* p, std::size_t bytes);
// Waits for all work enqueued so far, then copies `bytes` from the device's memory to host memory.
void read_back(Device device, void* host_dst, const void* src, std::size_t bytes);

}  // namespace crumb
