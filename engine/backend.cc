#include "engine/backend.h"

#include <cstring>
#include <mutex>

#include "engine/error.h"
#include "engine/optimizer.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#include "kernels/cuda/check.h"
#endif

namespace crumb {
namespace {

// The CPU runs everything on the calling thread: nothing to record, wait for or stage.
class CpuBackend final : public Backend {
 public:
  CpuBackend() : Backend(Device::CPU, 0) {}
  std::string description() const override { return "cpu"; }
  void activate() override {}
  std::size_t free_bytes() const override { return 0; }
  std::size_t runtime_bytes() const override { return 0; }
  void zero(void* p, std::size_t bytes) override { std::memset(p, 0, bytes); }
  void synchronize() override {}
  void upload(void* p, const void* host_src, std::size_t bytes) override { std::memcpy(p, host_src, bytes); }
  void read_back(void* host_dst, const void* src, std::size_t bytes) override { std::memcpy(host_dst, src, bytes); }
  std::unique_ptr<Recording> record(const std::function<void()>&) override { return nullptr; }
  std::unique_ptr<InputStaging> make_staging(const std::vector<std::size_t>&) override { return nullptr; }
  std::unique_ptr<CopyQueue> make_copy_queue(int tickets) override { return std::make_unique<ThreadCopyQueue>(tickets); }
  void* allocate(Memory kind, std::size_t) override {
    CRUMB_FAIL("the CPU backend has no ", kind == Memory::Pinned ? "pinned" : "device", " memory; use --device cpu");
  }
  void release(Memory, void*) noexcept override {}
  void copy(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
};

}  // namespace

// ---- the implementation table: each op family binds its rows next to its declaration (engine/ops/<op>.cc
// for the CPU, engine/ops/<op>_cuda.cc for CUDA); this is the one list of them.
// engine/ops/<family>.cc
void bind_linear_cpu(ImplTable& t);
void bind_conv2d_cpu(ImplTable& t);
void bind_pool_cpu(ImplTable& t);
void bind_elementwise_cpu(ImplTable& t);
void bind_softmax_xent_cpu(ImplTable& t);
void bind_norm_cpu(ImplTable& t);
void bind_dropout_cpu(ImplTable& t);
void bind_swap(ImplTable& t);  // every device: the copies are the device's CopyQueue
#if CRUMB_HAVE_CUDA
// engine/ops/<family>_cuda.cc
void bind_linear_cuda(ImplTable& t);
void bind_conv2d_cuda(ImplTable& t);
void bind_pool_cuda(ImplTable& t);
void bind_elementwise_cuda(ImplTable& t);
void bind_softmax_xent_cuda(ImplTable& t);
void bind_norm_cuda(ImplTable& t);
void bind_dropout_cuda(ImplTable& t);
#endif

const ImplTable& impl_table() {
  static const ImplTable table = [] {
    ImplTable t;
    for (void (*bind)(ImplTable&) : {bind_linear_cpu, bind_conv2d_cpu, bind_pool_cpu, bind_elementwise_cpu,
                                     bind_softmax_xent_cpu, bind_norm_cpu, bind_dropout_cpu, bind_swap})
      bind(t);
#if CRUMB_HAVE_CUDA
    for (void (*bind)(ImplTable&) : {bind_linear_cuda, bind_conv2d_cuda, bind_pool_cuda, bind_elementwise_cuda,
                                     bind_softmax_xent_cuda, bind_norm_cuda, bind_dropout_cuda})
      bind(t);
#endif
    return t;
  }();
  return table;
}

bool device_available(Device device) {
#if CRUMB_HAVE_CUDA
  return device == Device::CPU || cuda::cuda_device_available();
#else
  return device == Device::CPU;
#endif
}

// The one place that knows which devices this build has.
Backend& backend(Device device, int index) {
  if (device == Device::CPU) {
    CRUMB_CHECK(index == 0, "the CPU is device 0, not ", index);
    static CpuBackend cpu;
    return cpu;
  }
#if CRUMB_HAVE_CUDA
  // One backend per GPU, created on first use and kept: its streams and handles are set up once.
  // Never destroyed: Buffers released during static destruction still reach their backend.
  static std::mutex mu;
  static auto* gpus = new std::vector<std::unique_ptr<Backend>>();
  std::lock_guard<std::mutex> lock(mu);
  CRUMB_CHECK(index >= 0 && index < 1024, "CUDA device index ", index, " is out of range; use --device cpu");
  if (gpus->size() <= static_cast<std::size_t>(index)) gpus->resize(index + 1);
  if (!(*gpus)[index]) (*gpus)[index] = std::make_unique<cuda::CudaBackend>(index);
  return *(*gpus)[index];
#else
  CRUMB_FAIL("this build of Crumb has no CUDA backend (build it where nvcc and the CUDA toolkit are found); "
             "use --device cpu");
#endif
}

#if CRUMB_HAVE_CUDA
extern const OptimizerKernels kCudaOptimizerKernels;  // engine/cuda/optimizer_kernels.cc
#endif

const OptimizerKernels& optimizer_kernels(Device device) {
  if (device == Device::CPU) return kCpuOptimizerKernels;
  backend(device);  // throws, ending in "use --device cpu", where the device is missing
#if CRUMB_HAVE_CUDA
  return kCudaOptimizerKernels;
#else
  CRUMB_FAIL("unreachable: backend() found a CUDA device in a build without CUDA");
#endif
}

CompiledStep compile_step(Backend& b, const Graph& g, const Node& n, int max_batch) {
  CompiledStep c;
  if (n.def->view) return c;
  const Device device = b.device();
  const OpImpl* impl = impl_table().find(*n.def, device, g.float_dtype());
  if (!impl) {
    const bool f32_elsewhere = impl_table().find(*n.def, device, DType::F32) != nullptr;
    CRUMB_FAIL("layer '", n.name, "' (", n.def->name, ") has no ", device_name(device), " implementation for ",
               dtype_name(g.float_dtype()), f32_elsewhere ? " (this device runs float32 graphs only)" : "");
  }
  c.fn = impl->run;
  c.commit = impl->commit;
  try {
    if (impl->prepare) c.state = impl->prepare(g, n, max_batch, b);
    if (impl->workspace) c.workspace = impl->workspace(g, n, max_batch, c.state.get());
  } catch (const Error& e) {
    // A plan's own errors (no algorithm fits, a library failure) name the shape; add the layer.
    CRUMB_FAIL("layer '", n.name, "' (", n.def->name, "): ", e.what());
  }
  return c;
}

}  // namespace crumb
