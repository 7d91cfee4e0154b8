// The SGD step, one pass over a flat parameter block: the CPU's (crumb::cpu, kernels/cpu/sgd.cc) and their CUDA twins
// (crumb::cuda, kernels/cuda/sgd.cu). The conventions of every CPU kernel (raw pointers, explicit shapes, no
// allocation, write modes, float and double) are in docs/architecture.md, Kernels; those of every CUDA launcher (device
// pointers, the CPU twin's semantics, checked preconditions, asynchronous on `stream`, no allocation) in docs/cuda.md.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/step_extras.h"

namespace crumb::cpu {

// torch.optim.SGD semantics (dampening 0): g = grad + weight_decay * p;
// buf = first_step ? g : momentum * buf + g; p -= lr * u with u = g + momentum * buf under Nesterov,
// else buf (momentum != 0), else g. momentum_buf is never touched (may be null) when momentum == 0 and
// is not read on the first step (may hold garbage). nesterov needs momentum != 0. grad is read as
// grad * extras.grad_scale, and extras.copy receives the updated parameters (kernels/step_extras.h).
void sgd_momentum_step(float* params, const float* grads, float* momentum_buf, std::size_t count, float lr,
                       float momentum, float weight_decay, bool nesterov, bool first_step,
                       const StepExtras& extras = {});
// The same in float64 (torch.optim.SGD on float64 parameters); float64 parameters have no 16-bit copies
// (extras.copy is null).
void sgd_momentum_step(double* params, const double* grads, double* momentum_buf, std::size_t count, double lr,
                       double momentum, double weight_decay, bool nesterov, bool first_step,
                       const StepExtras& extras = {});

}  // namespace crumb::cpu

namespace crumb::cuda {

// One launch over the engine's flat parameter block, so it is the multi-tensor step; the semantics and
// layout of the CPU twin above.
void sgd_momentum_step(float* params, const float* grads, float* momentum_buf, std::size_t count, float lr,
                       float momentum, float weight_decay, bool nesterov, bool first_step, const StepExtras& extras,
                       cudaStream_t stream);

}  // namespace crumb::cuda
