#include "engine/device/backend.h"

#include <cstring>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/device/widen.h"
#include "kernels/bf16_dot.h"
#include "kernels/convert.h"

namespace crumb {
namespace {

// The CPU runs everything on the calling thread: nothing to record, wait for or stage.
class CpuBackend final : public Backend {
 public:
  CpuBackend() : Backend(Device::CPU, 0) {}
  std::string description() const override { return "cpu"; }
  bool copies_overlap() const override { return false; }
  bool can_record() const override { return false; }
  // Host memory has no natural budget: 4 GiB, so that a batch is micro-batched only when a whole batch
  // would not fit in that.
  std::size_t default_budget() const override { return std::size_t{4} << 30; }
  std::vector<DType> float_dtypes() const override { return {DType::F32, DType::F64, DType::BF16, DType::F16}; }
  bool has_tf32() const override { return false; }
  // A handful of samples: enough for times to scale linearly (docs/memory.md: timed at 4, resnet20's step
  // at 8 came out 4-5% short), few enough that ResNet-50 at 224x224 takes seconds.
  int timing_batch() const override { return 8; }
  // The highest data cache level the kernel lists for CPU 0 (sysconf's level 3 is the whole package's on
  // some AMD parts: 384 MiB where a core reaches 32).
  std::size_t cache_bytes() const override {
    int best_level = 0;
    std::size_t best = 0;
    for (int i = 0; i < 16; ++i) {
      const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
      std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
      int level = 0;
      std::string type, size;
      if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) break;
      if (type == "Instruction" || level <= best_level) continue;
      char* unit = nullptr;
      const unsigned long long n = std::strtoull(size.c_str(), &unit, 10);
      const int shift = *unit == 'K' ? 10 : *unit == 'M' ? 20 : *unit == 'G' ? 30 : 0;
      best_level = level;
      best = static_cast<std::size_t>(n) << shift;
    }
    return best;
  }
  const char* communicator() const override { return "mpi"; }
  void activate() override {}
  std::size_t free_bytes() const override { return 0; }
  std::size_t runtime_bytes() const override { return 0; }
  void zero(void* p, std::size_t bytes) override { std::memset(p, 0, bytes); }
  void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, std::size_t count,
               bool accumulate) override {
    cpu::convert(dst, dst_dtype, src, src_dtype, count, accumulate);
  }
  void relayout(void* dst, DType dst_dtype, const void* src, DType src_dtype, ImageShape shape, Layout to,
                bool accumulate) override {
    cpu::relayout(dst, dst_dtype, src, src_dtype, shape, to, accumulate);
  }
  void synchronize() override {}
  void upload(void* p, const void* host_src, std::size_t bytes) override { std::memcpy(p, host_src, bytes); }
  void read_back(void* host_dst, const void* src, std::size_t bytes) override { std::memcpy(host_dst, src, bytes); }
  std::unique_ptr<Recording> record(const std::function<void()>&) override { return nullptr; }
  std::unique_ptr<InputStaging> make_staging(const std::vector<std::size_t>&) override { return nullptr; }
  std::unique_ptr<CopyQueue> make_copy_queue(int tickets) override { return std::make_unique<ThreadCopyQueue>(tickets); }
  void* allocate(Memory kind, std::size_t) override {
    CRUMB_FAIL("the CPU backend has no ", memory_name(kind), " memory; use --device cpu");
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
bool always() { return true; }
std::unique_ptr<Backend> make_cpu(int index) {
  CRUMB_CHECK(index == 0, "the CPU is device 0, not ", index);
  if (const char* bad = cpu::bad_amx_setting())
    CRUMB_FAIL("CRUMB_CPU_AMX=", bad, " is neither on nor off (off keeps bf16 layers off the AMX tiles; on, or unset, ",
               "uses them where the CPU has them)");
  return std::make_unique<CpuBackend>();
}
// Never destroyed, nor are the backends in it: buffers released during static destruction still reach
// their backend. The CPU comes first, so the others can be looked for past it.
std::vector<Registered>& devices() {
  static auto* table = [] {
    auto* t = new std::vector<Registered>();
    t->push_back({Device::CPU, {always, make_cpu, Memory::Host, Memory::Host}, {}});
    return t;
  }();
  return *table;
}
Registered* find_device(Device device) {
  for (Registered& r : devices())
    if (r.device == device) return &r;
  return nullptr;
}
Registered& registered(Device device) {
  Registered* r = find_device(device);
  CRUMB_CHECK(r, "this build of Crumb has no ", device_name(device),
              " backend (build it where nvcc and the CUDA toolkit are found); use --device cpu");
  return *r;
}
}  // namespace

Memory Backend::memory() const { return memory_of(device_); }
Memory Backend::host_memory() const { return registered(device_).factory.host_memory; }

void register_device(Device device, DeviceFactory factory) { devices().push_back({device, factory, {}}); }

bool device_available(Device device) {
  const Registered* r = find_device(device);
  return r && r->factory.available();
}

Device preferred_device() {
  for (auto r = devices().begin() + 1; r != devices().end(); ++r)
    if (r->factory.available()) return r->device;
  return Device::CPU;
}

Backend& backend(Device device, int index) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  Registered& r = registered(device);
  CRUMB_CHECK(index >= 0 && index < 1024, device_name(device), " device index ", index,
              " is out of range; use --device cpu");
  if (r.made.size() <= static_cast<std::size_t>(index)) r.made.resize(index + 1);
  if (!r.made[index]) r.made[index] = r.factory.create(index);
  return *r.made[index];
}

Memory memory_of(Device device) { return registered(device).factory.memory; }

Backend& backend_serving(Memory kind, int index) {
  for (const Registered& r : devices())
    if (r.factory.memory == kind || r.factory.host_memory == kind) return backend(r.device, index);
  CRUMB_FAIL("this build of Crumb has no device with ", memory_name(kind),
             " memory (build it where nvcc and the CUDA toolkit are found); use --device cpu");
}

CompiledStep compile_step(Backend& b, const Graph& g, const Node& n, int max_batch) {
  CompiledStep c;
  if (n.def->view) return c;
  const Device device = b.device();
  const OpImpl* impl = impl_table().find(*n.def, device, g.float_dtype());
  const OpImpl* f32 = impl_table().find(*n.def, device, DType::F32);
  const bool widen = !impl && f32 && is_half(g.float_dtype());
  if (widen) impl = f32;
  if (!impl) {
    std::string runs;
    for (DType d : b.float_dtypes()) runs += std::string(runs.empty() ? "" : ", ") + dtype_name(d);
    CRUMB_FAIL("layer '", n.name, "' (", n.def->name, ") has no ", device_name(device), " implementation for ",
               dtype_name(g.float_dtype()), f32 ? " (this device runs " + runs + " graphs)" : "");
  }
  CRUMB_CHECK(n.layout == Layout::NCHW || n.def->layouts != Layouts::Nchw, "layer '", n.name, "' (", n.def->name,
              ") runs in NCHW only, but the plan has it in NHWC; run with --channels-last off");
  const bool relayout = n.layout == Layout::NHWC && n.def->layouts == Layouts::Nhwc && !impl->nhwc;
  if (widen || relayout) {
    try {
      return compile_adapted(b, g, n, max_batch, *impl, widen, relayout);
    } catch (const Error& e) {
      CRUMB_FAIL("layer '", n.name, "' (", n.def->name, "): ", e.what());
    }
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
