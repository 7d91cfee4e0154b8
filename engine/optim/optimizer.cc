#include "engine/optim/optimizer.h"

#include <utility>
#include <vector>

#include "engine/base/registry.h"
#include "engine/optim/adamw.h"
#include "engine/device/backend.h"
#include "engine/base/error.h"
#include "engine/optim/sgd.h"
#include "kernels/adamw.h"
#include "kernels/elementwise.h"
#include "kernels/sgd.h"

#if CRUMB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#include "kernels/cuda/reduce.h"
#endif

namespace crumb {

const char* optimizer_name(OptimizerKind kind) { return kind == OptimizerKind::Sgd ? "sgd" : "adamw"; }

void OptimizerConfig::validate() const {
  CRUMB_CHECK(lr > 0, "learning rate must be > 0, got ", lr);
  CRUMB_CHECK(weight_decay >= 0, "weight decay must be >= 0, got ", weight_decay);
  if (kind == OptimizerKind::Sgd) {
    CRUMB_CHECK(momentum >= 0 && momentum < 1, "momentum must be in [0, 1), got ", momentum);
    CRUMB_CHECK(!nesterov || momentum > 0, "Nesterov momentum needs a momentum > 0");
  } else {
    CRUMB_CHECK(beta1 >= 0 && beta1 < 1, "beta1 must be in [0, 1), got ", beta1);
    CRUMB_CHECK(beta2 >= 0 && beta2 < 1, "beta2 must be in [0, 1), got ", beta2);
    CRUMB_CHECK(eps > 0, "eps must be > 0, got ", eps);
  }
  schedule.validate();
}

const std::vector<std::string>& state_names(OptimizerKind kind) {
  static const std::vector<std::string> sgd{"momentum"}, adamw{"exp_avg", "exp_avg_sq"};
  return kind == OptimizerKind::Sgd ? sgd : adamw;
}

std::vector<std::string> state_names(const OptimizerConfig& cfg) {
  if (cfg.kind == OptimizerKind::Sgd && cfg.momentum == 0) return {};
  return state_names(cfg.kind);
}

Optimizer::Optimizer(ParamStore& params, const OptimizerConfig& cfg)
    : params_(params), cfg_(cfg), backend_(backend(params.device(), params.index())),
      kernels_(optimizer_kernels(params.device())) {
  const bool f64 =
      params.dtype() == DType::F64 && kernels_.sgd_f64 && kernels_.adamw_f64 && kernels_.count_nonfinite_f64;
  CRUMB_CHECK(params.dtype() == DType::F32 || f64, optimizer_name(cfg.kind), " runs on float32 parameters",
              kernels_.sgd_f64 ? " and float64 ones" : "", " on ", device_name(params.device()), "; these are ",
              dtype_name(params.dtype()));
  cfg.validate();
  for (const std::string& name : state_names(cfg)) state_.push_back({name, MirroredBuffer(params.bytes(), params.device(), params.index())});
  nonfinite_ = Buffer(sizeof(uint64_t), memory_of(params.device()), params.index());
  nonfinite_grads_ = Buffer(sizeof(uint64_t), memory_of(params.device()), params.index());
}

StepExtras Optimizer::extras(float grad_scale, const Span& span, uint64_t* nonfinite) const {
  char* copy = static_cast<char*>(params_.device_copy_block());
  return StepExtras{grad_scale, copy ? copy + span.offset * dtype_size(params_.copy_dtype()) : nullptr,
                    params_.copy_dtype(), nonfinite};
}

void Optimizer::step(float grad_scale) {
  backend_.activate();
  auto* const count = reinterpret_cast<uint64_t*>(nonfinite_.data());
  const Span all{0, params_.count(), params_.device_grad_block()};
  update(lr(steps_), extras(grad_scale, all, kernels_.counts_nonfinite ? count : nullptr), all);
  ++steps_;
  if (!kernels_.counts_nonfinite) count_nonfinite(count, params_.device_data_block());
}

void Optimizer::step_param(ValueId p, const void* grad) {
  const Span span{params_.byte_offset(p) / dtype_size(params_.dtype()),
                  static_cast<std::size_t>(params_.graph().value(p).count(1)), grad};
  update(lr(steps_), extras(1.0f, span, nullptr), span);
}

void Optimizer::end_step() {
  ++steps_;
  count_nonfinite(nonfinite_.data(), params_.device_data_block());
}

void Optimizer::count_nonfinite(void* out, const void* x) {
  auto* count = static_cast<uint64_t*>(out);
  if (params_.dtype() == DType::F64)
    kernels_.count_nonfinite_f64(backend_, count, static_cast<const double*>(x), params_.count());
  else
    kernels_.count_nonfinite(backend_, count, static_cast<const float*>(x), params_.count());
}

uint64_t Optimizer::nonfinite_parameters() {
  uint64_t count = 0;
  backend_.read_back(&count, nonfinite_.data(), sizeof count);
  return count;
}

uint64_t Optimizer::nonfinite_gradients() {
  backend_.activate();
  count_nonfinite(nonfinite_grads_.data(), params_.device_grad_block());
  uint64_t count = 0;
  backend_.read_back(&count, nonfinite_grads_.data(), sizeof count);
  return count;
}

void Optimizer::set_total_steps(long long total) {
  LrSchedule s = cfg_.schedule;
  s.total_steps = total;
  s.validate();
  cfg_.schedule = s;
}

std::size_t Optimizer::state_bytes() const {
  std::size_t bytes = 0;
  for (const StateBlock& s : state_) bytes += s.block.size();
  return bytes;
}

void Optimizer::to_host() {
  for (StateBlock& s : state_) s.block.to_host();
}

void Optimizer::to_device() {
  for (StateBlock& s : state_) s.block.to_device();
}

void Optimizer::set_steps(long long steps) {
  CRUMB_CHECK(steps >= 0, "optimizer step count must be >= 0, got ", steps);
  steps_ = steps;
}

std::unique_ptr<Optimizer> make_optimizer(ParamStore& params, const OptimizerConfig& cfg) {
  if (cfg.kind == OptimizerKind::Sgd) return std::make_unique<Sgd>(params, cfg);
  return std::make_unique<AdamW>(params, cfg);
}

namespace {
std::vector<std::pair<Device, const OptimizerKernels*>>& kernel_table() {
  static std::vector<std::pair<Device, const OptimizerKernels*>> table;
  return table;
}

const OptimizerKernels kCpuKernels = {
    [](Backend&, float* p, const float* g, float* m, std::size_t n, float lr, float momentum, float wd, bool nesterov,
       bool first, const StepExtras& x) { cpu::sgd_momentum_step(p, g, m, n, lr, momentum, wd, nesterov, first, x); },
    [](Backend&, float* p, const float* g, float* m, float* v, std::size_t n, const AdamWScalars& s,
       const StepExtras& x) { cpu::adamw_step(p, g, m, v, n, s, x); },
    [](Backend&, uint64_t* out, const float* x, std::size_t n) { *out = cpu::count_nonfinite(x, n); },
    [](Backend&, double* p, const double* g, double* m, std::size_t n, double lr, double momentum, double wd,
       bool nesterov, bool first, const StepExtras& x) {
      cpu::sgd_momentum_step(p, g, m, n, lr, momentum, wd, nesterov, first, x);
    },
    [](Backend&, double* p, const double* g, double* m, double* v, std::size_t n, const AdamWScalarsOf<double>& s,
       const StepExtras& x) { cpu::adamw_step(p, g, m, v, n, s, x); },
    [](Backend&, uint64_t* out, const double* x, std::size_t n) { *out = cpu::count_nonfinite(x, n); },
    true,
};
}  // namespace

CRUMB_ON_LOAD { register_optimizer_kernels(Device::CPU, kCpuKernels); }

void register_optimizer_kernels(Device device, const OptimizerKernels& kernels) {
  kernel_table().emplace_back(device, &kernels);
}

const OptimizerKernels& optimizer_kernels(Device device) {
  for (const auto& [d, k] : kernel_table())
    if (d == device) return *k;
  backend(device);  // throws, ending in "use --device cpu", where the build has no such device
  CRUMB_FAIL("the ", device_name(device), " backend has no optimizer kernels");
}

}  // namespace crumb

#if CRUMB_HAVE_CUDA
// The optimizers' CUDA kernels (kernels/cuda/sgd.cu, adamw.cu): one launch each over the flat parameter
// block, on the backend's compute stream.
namespace crumb::cuda_rows {

namespace {
const OptimizerKernels kCudaKernels = {
    [](Backend& b, float* p, const float* g, float* m, std::size_t n, float lr, float momentum, float wd,
       bool nesterov, bool first, const StepExtras& x) {
      cuda::sgd_momentum_step(p, g, m, n, lr, momentum, wd, nesterov, first, x, cuda::CudaBackend::of(b).compute());
    },
    [](Backend& b, float* p, const float* g, float* m, float* v, std::size_t n, const AdamWScalars& s,
       const StepExtras& x) { cuda::adamw_step(p, g, m, v, n, s, x, cuda::CudaBackend::of(b).compute()); },
    [](Backend& b, uint64_t* out, const float* x, std::size_t n) {
      static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "the kernel counts in unsigned long long");
      cuda::count_nonfinite(reinterpret_cast<unsigned long long*>(out), x, n, cuda::CudaBackend::of(b).compute());
    },
};

}  // namespace

CRUMB_ON_LOAD { register_optimizer_kernels(Device::CUDA, kCudaKernels); }

}  // namespace crumb::cuda_rows
#endif  // CRUMB_HAVE_CUDA
