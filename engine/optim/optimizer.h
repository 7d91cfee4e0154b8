// Optimizers behind one interface, applied once per batch in one pass over the whole parameter block
// (one kernel launch on CUDA, on the compute stream). Each keeps its persistent state in blocks of the
// parameter block's layout, on the parameters' device, named by PyTorch's state keys ("momentum_buffer"
// is "momentum" here, as in Crumb's checkpoints; AdamW: "exp_avg", "exp_avg_sq"), and counts its steps;
// the learning rate of each step comes from the schedule (engine/optim/lr_schedule.h).
//   sgd:   torch.optim.SGD (dampening 0), momentum, Nesterov, weight decay added to the gradient (L2)
//   adamw: torch.optim.AdamW (bias correction, decoupled weight decay), op for op in float32
// Both run in the parameters' dtype: float32, or float64 (--precision fp64, on the CPU only).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/device/buffer.h"
#include "engine/optim/lr_schedule.h"
#include "kernels/adamw_scalars.h"
#include "kernels/step_extras.h"
#include "engine/run/params.h"

namespace crumb {

enum class OptimizerKind { Sgd, AdamW };
const char* optimizer_name(OptimizerKind kind);  // "sgd" | "adamw"

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::Sgd;
  // Doubles, as PyTorch's hyper-parameters are Python floats: the host arithmetic (bias corrections,
  // schedules) runs in double and each value is rounded to float only where a float32 op takes it.
  double lr = 0.01;
  double weight_decay = 0;  // sgd: L2 term added to the gradient; adamw: decoupled, p *= 1 - lr * wd
  double momentum = 0;      // sgd
  bool nesterov = false;    // sgd; needs momentum
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
  LrSchedule schedule;
  // Throws crumb::Error naming the bad field.
  void validate() const;
};

// The state blocks an optimizer of this kind can keep, by name.
const std::vector<std::string>& state_names(OptimizerKind kind);
// The state blocks this configuration keeps (SGD without momentum keeps none).
std::vector<std::string> state_names(const OptimizerConfig& cfg);

class Backend;

// One device's optimizer kernels, each one pass over the flat parameter block, in order with the
// device's other work. Registered per device like the op rows: both in engine/optim/optimizer.cc.
struct OptimizerKernels {
  void (*sgd)(Backend& b, float* params, const float* grads, float* momentum_buf, std::size_t count, float lr,
              float momentum, float weight_decay, bool nesterov, bool first_step, const StepExtras& extras);
  void (*adamw)(Backend& b, float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                std::size_t count, const AdamWScalars& s, const StepExtras& extras);
  // *out (the device's memory) = elements of x that are NaN or infinite.
  void (*count_nonfinite)(Backend& b, uint64_t* out, const float* x, std::size_t count);
  // The same over float64 parameters, on a device that trains them (the CPU); null on the others.
  void (*sgd_f64)(Backend& b, double* params, const double* grads, double* momentum_buf, std::size_t count,
                  double lr, double momentum, double weight_decay, bool nesterov, bool first_step,
                  const StepExtras& extras) = nullptr;
  void (*adamw_f64)(Backend& b, double* params, const double* grads, double* exp_avg, double* exp_avg_sq,
                    std::size_t count, const AdamWScalarsOf<double>& s, const StepExtras& extras) = nullptr;
  void (*count_nonfinite_f64)(Backend& b, uint64_t* out, const double* x, std::size_t count) = nullptr;
  // sgd and adamw count the non-finite parameters in their pass when StepExtras::nonfinite asks (the CPU's);
  // elsewhere count_nonfinite runs after them.
  bool counts_nonfinite = false;
};
// Adds a device's kernels, at load time (CRUMB_ON_LOAD).
void register_optimizer_kernels(Device device, const OptimizerKernels& kernels);
// Throws crumb::Error (ending in "use --device cpu") for a device this build has not.
const OptimizerKernels& optimizer_kernels(Device device);

// One persistent block of optimizer state, element i belonging to element i of the parameter block (and
// of its dtype).
struct StateBlock {
  std::string name;
  MirroredBuffer block;
  // The host copy of a float32 block; on CUDA current after Optimizer::to_host().
  float* host() const { return reinterpret_cast<float*>(block.host()); }
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  OptimizerKind kind() const { return cfg_.kind; }
  const ParamStore& params() const { return params_; }
  const OptimizerConfig& config() const { return cfg_; }
  // Updates every parameter from the gradients at lr(steps()), then counts the step. Also counts, on the
  // device and in order with the update, the parameters the step left NaN or infinite. The gradients are
  // read multiplied by grad_scale (1 / the fp16 loss scale); the parameters' 16-bit copies, if the store
  // has them, are written in the same pass.
  void step(float grad_scale = 1.0f);
  // The same step made one parameter at a time, in the backward pass (engine/optim/step_in_backward.h):
  // step_param updates p as step() would, from its gradient at `grad` (the device's memory, p's elements,
  // unpadded); end_step, once every parameter is updated, counts the step and its non-finite parameters.
  // No loss scale: fp16's check must see the whole gradient before any update.
  void step_param(ValueId p, const void* grad);
  void end_step();
  // How many parameters the last step left NaN or infinite (0 before any step): a diverged run, which
  // the ReLU can hide from the loss (it maps NaN to 0). Waits for the step (cheap right after the next
  // batch, which waits for it anyway).
  uint64_t nonfinite_parameters();
  // How many elements of the gradient block are NaN or infinite now (fp16's overflow check, once per
  // step after the last micro-batch). Waits for the gradients.
  uint64_t nonfinite_gradients();
  // The learning rate of optimizer step `step` (0-based).
  double lr(long long step) const { return cfg_.schedule.lr(cfg_.lr, step); }
  // The cosine schedule's horizon: a run resumed at step s of n more steps anneals to 0 at s + n.
  void set_total_steps(long long total);

  // Zero-filled at construction, as PyTorch's lazily created state.
  const std::vector<StateBlock>& state() const { return state_; }
  std::size_t state_bytes() const;
  void to_host();
  void to_device();
  long long steps() const { return steps_; }
  // Resuming from a checkpoint: the count decides whether SGD starts its momentum afresh and the size
  // of AdamW's bias corrections, and where the schedule stands.
  void set_steps(long long steps);

 protected:
  Optimizer(ParamStore& params, const OptimizerConfig& cfg);
  // Elements [offset, offset + count) of the parameter block (and of each state block), and their gradients.
  struct Span {
    std::size_t offset = 0, count = 0;
    const void* grads = nullptr;  // count elements in the device's memory
  };
  // The update of step steps() (0-based) at learning rate lr of the span's parameters, enqueued on the
  // parameters' device. extras.copy points at the span's first 16-bit copy.
  virtual void update(double lr, const StepExtras& extras, const Span& span) = 0;
  // The span's parameters, and state block i's part, on the device, as T (the parameters' type).
  template <class T> T* device_params(const Span& span) const {
    return static_cast<T*>(params_.device_data_block()) + span.offset;
  }
  template <class T> T* device_state(std::size_t i, const Span& span) const {
    return reinterpret_cast<T*>(state_[i].block.device()) + span.offset;
  }

  ParamStore& params_;
  OptimizerConfig cfg_;
  // The parameters' device and its kernels, looked up once: every step uses them.
  Backend& backend_;
  const OptimizerKernels& kernels_;

 private:
  // *out (the device's memory) = elements of x (count parameters' worth) that are NaN or infinite.
  void count_nonfinite(void* out, const void* x);
  StepExtras extras(float grad_scale, const Span& span, uint64_t* nonfinite) const;

  std::vector<StateBlock> state_;
  long long steps_ = 0;
  Buffer nonfinite_;  // 8 bytes in the device's memory: the last step's count
  Buffer nonfinite_grads_;  // 8 bytes in the device's memory: nonfinite_gradients()'s count
};

// The optimizer of cfg.kind over params (float32, or float64 on the CPU), state allocated on params' device. Throws
// crumb::Error on an invalid configuration.
std::unique_ptr<Optimizer> make_optimizer(ParamStore& params, const OptimizerConfig& cfg);

}  // namespace crumb
