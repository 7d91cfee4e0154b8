#include "engine/backend.h"

#include <cstring>

#include "engine/error.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/context.h"
#include "engine/cuda/recording.h"
#include "kernels/cuda/check.h"
#endif

namespace crumb {
namespace {

#if !CRUMB_HAVE_CUDA
[[noreturn]] void no_cuda() {
  CRUMB_FAIL("this build of Crumb has no CUDA backend (build it where nvcc and the CUDA toolkit are found); "
             "use --device cpu");
}
#endif

}  // namespace

CompiledStep compile_step(Device device, const Graph& g, const Node& n, int max_batch) {
  CompiledStep c;
  if (n.def->view) return c;
  CRUMB_CHECK(device_available(device), "no usable ", device_name(device), " device: ",
              CRUMB_HAVE_CUDA ? "no GPU, or its driver is missing or too old" : "this build of Crumb has no CUDA backend",
              "; use --device cpu");
  const OpImpl* impl = impl_table().find(*n.def, device, g.float_dtype());
  if (!impl) {
    const bool f32_elsewhere = impl_table().find(*n.def, device, DType::F32) != nullptr;
    CRUMB_FAIL("layer '", n.name, "' (", n.def->name, ") has no ", device_name(device), " implementation for ",
               dtype_name(g.float_dtype()), f32_elsewhere ? " (this device runs float32 graphs only)" : "");
  }
  c.fn = impl->run;
  try {
    if (impl->prepare) c.state = impl->prepare(g, n, max_batch);
    if (impl->workspace) c.workspace = impl->workspace(g, n, max_batch, c.state.get());
  } catch (const Error& e) {
    // A plan's own errors (no algorithm fits, a library failure) name the shape; add the layer.
    CRUMB_FAIL("layer '", n.name, "' (", n.def->name, "): ", e.what());
  }
  return c;
}

bool device_available(Device device) {
#if CRUMB_HAVE_CUDA
  return device == Device::CPU || cuda::cuda_device_available();
#else
  return device == Device::CPU;
#endif
}

std::string device_description(Device device) {
  if (device == Device::CPU) return "cpu";
#if CRUMB_HAVE_CUDA
  return cuda::Context::get().description();
#else
  no_cuda();
#endif
}

std::size_t device_free_bytes(Device device) {
  if (device == Device::CPU) return 0;
#if CRUMB_HAVE_CUDA
  cuda::Context::get();  // creates the CUDA context, whose own memory is then not counted as free
  std::size_t free_bytes = 0, total = 0;
  CRUMB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  return free_bytes;
#else
  no_cuda();
#endif
}

std::size_t runtime_bytes(Device device) {
#if CRUMB_HAVE_CUDA
  return device == Device::CUDA ? cuda::Context::kBlasWorkspaceBytes : 0;
#else
  (void)device;
  return 0;
#endif
}

std::unique_ptr<Recording> record(Device device, const std::function<void()>& enqueue) {
  if (device == Device::CPU) return nullptr;
#if CRUMB_HAVE_CUDA
  return cuda::record(enqueue);
#else
  (void)enqueue;
  no_cuda();
#endif
}

void zero_in_order(Device device, void* p, std::size_t bytes) {
  if (device == Device::CPU) {
    std::memset(p, 0, bytes);
    return;
  }
#if CRUMB_HAVE_CUDA
  CRUMB_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda::Context::get().compute()));
#else
  no_cuda();
#endif
}

void read_back(Device device, void* host_dst, const void* src, std::size_t bytes) {
  if (device == Device::CPU) {
    std::memcpy(host_dst, src, bytes);
    return;
  }
#if CRUMB_HAVE_CUDA
  const cudaStream_t stream = cuda::Context::get().compute();
  CRUMB_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  // Kernel faults of the steps before surface here, named by this call.
  CRUMB_CUDA_CHECK(cudaStreamSynchronize(stream));
#else
  no_cuda();
#endif
}

}  // namespace crumb
