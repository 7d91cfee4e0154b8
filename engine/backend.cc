#include "engine/backend.h"

#include <cstring>
#include <mutex>

#include "engine/error.h"

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
  std::size_t free_bytes() const override { return 0; }
  std::size_t runtime_bytes() const override { return 0; }
  void zero(void* p, std::size_t bytes) override { std::memset(p, 0, bytes); }
  void read_back(void* host_dst, const void* src, std::size_t bytes) override { std::memcpy(host_dst, src, bytes); }
  std::unique_ptr<Recording> record(const std::function<void()>&) override { return nullptr; }
  std::unique_ptr<InputStaging> make_staging(const std::vector<std::size_t>&) override { return nullptr; }
};

}  // namespace

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
  static std::mutex mu;
  static std::vector<std::unique_ptr<Backend>> gpus;
  std::lock_guard<std::mutex> lock(mu);
  CRUMB_CHECK(index >= 0 && index < 1024, "CUDA device index ", index, " is out of range; use --device cpu");
  if (gpus.size() <= static_cast<std::size_t>(index)) gpus.resize(index + 1);
  if (!gpus[index]) gpus[index] = std::make_unique<cuda::CudaBackend>(index);
  return *gpus[index];
#else
  CRUMB_FAIL("this build of Crumb has no CUDA backend (build it where nvcc and the CUDA toolkit are found); "
             "use --device cpu");
#endif
}

CompiledStep compile_step(Device device, const Graph& g, const Node& n, int max_batch) {
  CompiledStep c;
  if (n.def->view) return c;
  Backend& b = backend(device);  // throws, ending in "use --device cpu", where the device is missing
  const OpImpl* impl = impl_table().find(*n.def, device, g.float_dtype());
  if (!impl) {
    const bool f32_elsewhere = impl_table().find(*n.def, device, DType::F32) != nullptr;
    CRUMB_FAIL("layer '", n.name, "' (", n.def->name, ") has no ", device_name(device), " implementation for ",
               dtype_name(g.float_dtype()), f32_elsewhere ? " (this device runs float32 graphs only)" : "");
  }
  c.fn = impl->run;
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
