#include "engine/device/backend.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "engine/base/error.h"

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

namespace {
struct Registered {
  Device device;
  DeviceFactory factory;
  std::vector<std::unique_ptr<Backend>> made;  // by device index, created on first use
};
// Never destroyed, nor are the backends in it: buffers released during static destruction still reach
// their backend.
std::vector<Registered>& devices() {
  static auto* table = new std::vector<Registered>();
  return *table;
}
Registered* find_device(Device device) {
  for (Registered& r : devices())
    if (r.device == device) return &r;
  return nullptr;
}
}  // namespace

void register_device(Device device, DeviceFactory factory) { devices().push_back({device, factory, {}}); }

bool device_available(Device device) {
  if (device == Device::CPU) return true;
  const Registered* r = find_device(device);
  return r && r->factory.available();
}

Backend& backend(Device device, int index) {
  if (device == Device::CPU) {
    CRUMB_CHECK(index == 0, "the CPU is device 0, not ", index);
    static CpuBackend cpu;
    return cpu;
  }
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  Registered* r = find_device(device);
  CRUMB_CHECK(r, "this build of Crumb has no ", device_name(device),
              " backend (build it where nvcc and the CUDA toolkit are found); use --device cpu");
  CRUMB_CHECK(index >= 0 && index < 1024, device_name(device), " device index ", index,
              " is out of range; use --device cpu");
  if (r->made.size() <= static_cast<std::size_t>(index)) r->made.resize(index + 1);
  if (!r->made[index]) r->made[index] = r->factory.create(index);
  return *r->made[index];
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
