// A device the engine runs on: the CPU, or CUDA device `index` with its compute and copy streams and its
// library handles (engine/cuda/cuda_backend.h, which registers itself). backend() hands out the devices
// the build registered; everything device-specific outside the op rows (recording runs, zeroing, reading
// results back, input staging) goes through a Backend, and op rows reach theirs through StepArgs::backend.
// Callers ask a backend what they need to know about its device (which memory it computes in and stages
// from, whether copies overlap compute, its default budget, ...) instead of branching on the device kind.
// On the CPU everything happens on the calling thread; on CUDA work is enqueued on the compute stream and
// read_back() is where the host waits.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/device/buffer.h"
#include "engine/device/copy_queue.h"
#include "engine/graph/graph.h"
#include "engine/graph/op.h"
#include "engine/device/staging.h"
#include "kernels/convert.h"

namespace crumb {

// One node compiled for a device and a largest micro-batch.
struct CompiledStep {
  StepFn fn = nullptr;            // null for views (no computation)
  std::unique_ptr<OpState> state;  // per-node state, if the implementation needs one
  std::size_t workspace = 0;       // scratch bytes at the largest micro-batch
  StepFn commit = nullptr;         // the implementation's commit of per-batch totals, if any
};

// Device work recorded once and replayed as a whole (on CUDA, a graph of everything one executor run
// enqueues on the compute stream, launched with one call instead of one per kernel).
class Recording {
 public:
  virtual ~Recording() = default;
  // Enqueues the recorded work on the device's compute stream, as `enqueue` would have.
  virtual void replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  Device device() const { return device_; }
  int index() const { return index_; }

  // What callers ask instead of branching on the device kind.
  // The memory it computes in (arenas, parameters, metrics) and the host memory it stages inputs from and
  // keeps host pools and readbacks in, as its registration declares them (DeviceFactory): Host and Host on
  // the CPU; Cuda and Pinned on CUDA, whose asynchronous copies need page-locked host memory. Where the two
  // are one memory, kernels read the loader's batch buffers in place and a memory budget counts them;
  // otherwise inputs are copied to device slots (make_staging), which the budget counts, and host memory
  // lies outside it.
  Memory memory() const;
  Memory host_memory() const;
  // Whether copies between its memory and host memory run beside the kernels (a GPU's copy engines)
  // rather than taking time from them (the CPU's copy thread takes a core and memory bandwidth).
  virtual bool copies_overlap() const = 0;
  // Whether record() can capture work at all (CUDA graphs); where it cannot, every run enqueues its steps.
  virtual bool can_record() const = 0;
  // The memory budget when none is given (--memory-budget): bytes a run may plan for on this device.
  virtual std::size_t default_budget() const = 0;
  // The float dtypes of the graphs it runs (graph.float_dtype()): where the device has no 16-bit row of
  // an op, the float32 row runs on converted copies (engine/device/widen.h).
  virtual std::vector<DType> float_dtypes() const = 0;
  // Whether float32 products and convolutions may round their operands to TF32 when the graph allows it
  // (Graph::set_tf32): tensor cores that do; elsewhere the flag changes nothing.
  virtual bool has_tf32() const = 0;
  // Samples per micro-batch at which the cost model times kernels (engine/strategy/cost_model.h): enough
  // to fill the device, so that times scale linearly from there, and few enough to take seconds.
  virtual int timing_batch() const = 0;
  // Bytes of the last cache level before memory (the CPU's last level, the GPU's L2); 0 where unknown. The
  // cost model times kernels at a micro-batch whose operands outgrow it, as a step's do.
  virtual std::size_t cache_bytes() const = 0;
  // The kind of communicator that connects data-parallel ranks training on this device, as engine/dist
  // registers communicators ("mpi", "nccl").
  virtual const char* communicator() const = 0;

  // One line naming the device and the libraries that serve it, for logs (CUDA: the GPU, its compute
  // capability and memory, the driver's CUDA version, cuBLAS and cuDNN as loaded at run time).
  virtual std::string description() const = 0;
  // Bytes of device memory free now (CUDA); 0 for the CPU.
  virtual std::size_t free_bytes() const = 0;
  // Persistent device memory the runtime holds besides the model (cuBLAS's workspace on CUDA).
  virtual std::size_t runtime_bytes() const = 0;
  // Makes this device the calling thread's current one (CUDA: cudaSetDevice), before it enqueues work.
  virtual void activate() = 0;
  // Zero `bytes` at p (in the device's memory), in order with the work that follows.
  virtual void zero(void* p, std::size_t bytes) = 0;
  // dst = src (with accumulate: dst + src, in float32) converted between F32, BF16 and F16, count
  // elements in the device's memory, in order with the work around it (kernels/convert.h).
  virtual void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count,
                       bool accumulate = false) = 0;
  // dst (in layout `to`) = src (in the other layout), converted as convert() does (kernels/convert.h):
  // the channels-last conversions and the NCHW copies of rows without NHWC support.
  virtual void relayout(void* dst, DType dst_dtype, const void* src, DType src_dtype, ImageShape shape, Layout to,
                        bool accumulate = false) = 0;
  // Copies `bytes` of host memory to p (in the device's memory), in order with the work enqueued before
  // and after; the host bytes may be reused as soon as it returns (CUDA: an asynchronous copy from
  // pageable memory, which stages them before returning).
  virtual void upload(void* p, const void* host_src, std::size_t bytes) = 0;
  // Waits for all work enqueued so far (on the CPU, none is pending).
  virtual void synchronize() = 0;
  // Waits for all work enqueued so far, then copies `bytes` from the device's memory to host memory.
  virtual void read_back(void* host_dst, const void* src, std::size_t bytes) = 0;
  // Records what `enqueue` puts on the compute stream without running any of it. Null where the device
  // cannot record (the CPU) or the work could not be captured (a library call that refuses capture):
  // then nothing ran, and the caller runs `enqueue` itself. An error thrown by `enqueue` ends the
  // recording and propagates.
  virtual std::unique_ptr<Recording> record(const std::function<void()>& enqueue) = 0;
  // Device slots for micro-batch inputs of these byte sizes (engine/device/staging.h); null where kernels read
  // the host's batch buffers in place (the CPU).
  virtual std::unique_ptr<InputStaging> make_staging(const std::vector<std::size_t>& part_bytes) = 0;
  // Copies between device memory and the host pool with `tickets` tickets (engine/device/copy_queue.h): the
  // CUDA copy stream, or a copy thread on the CPU.
  virtual std::unique_ptr<CopyQueue> make_copy_queue(int tickets) = 0;
  // Zero-filled memory of a kind this device serves (its memory() and host_memory(); engine/device/buffer.cc
  // allocates Host memory itself), freed by release(). Running out is one crumb::Error naming what to lower.
  virtual void* allocate(Memory kind, std::size_t bytes) = 0;
  virtual void release(Memory kind, void* p) noexcept = 0;
  // Synchronous copy between any two kinds of memory, after all work enqueued on the device.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;

 protected:
  Backend(Device device, int index) : device_(device), index_(index) {}

 private:
  Device device_;
  int index_;
};

// A device as its implementation registers it at load time (CRUMB_ON_LOAD in engine/cuda/cuda_backend.cc;
// the CPU's is built in): whether the machine has a usable one, how to set one up, and the memory kinds
// its allocate() serves, which a Buffer finds its backend by without one at hand.
struct DeviceFactory {
  bool (*available)() = nullptr;
  std::unique_ptr<Backend> (*create)(int index) = nullptr;
  Memory memory = Memory::Host;       // Backend::memory()
  Memory host_memory = Memory::Host;  // Backend::host_memory()
};
void register_device(Device device, DeviceFactory factory);

// Whether the device can run: always for the CPU; for CUDA, a CUDA build on a machine with a usable GPU.
bool device_available(Device device);
// The device a run takes when none is named: the first usable one the build registered besides the CPU
// (a GPU), else the CPU.
Device preferred_device();
// The backend of device `index` of this kind, set up on first use (streams, handles) and kept for the
// process (never destroyed: buffers released during static destruction still reach their backend).
// Throws crumb::Error, ending in "use --device cpu", when the build or the machine has none.
Backend& backend(Device device, int index = 0);
// Backend::memory() of a device kind, without setting one up. Throws as backend() does where the build
// has no such device.
Memory memory_of(Device device);
// The backend of device `index` of the kind that serves `kind` of memory (Pinned and Cuda memory: CUDA's).
// Throws crumb::Error, ending in "use --device cpu", where the build or the machine has none.
Backend& backend_serving(Memory kind, int index);

// Compiles node n for backend b at its largest micro-batch: the implementation row for the graph's
// dtype, its per-node state (built on b) and its workspace. Throws crumb::Error when there is no such row.
CompiledStep compile_step(Backend& b, const Graph& g, const Node& n, int max_batch);

}  // namespace crumb
