// The AdamW step, one pass over a flat parameter block: the CPU's (crumb::cpu, kernels/cpu/adamw.cc) and their CUDA
// twins (crumb::cuda, kernels/cuda/adamw.cu). The conventions of every CPU kernel (raw pointers, explicit shapes, no
// allocation, write modes, float and double) are in docs/architecture.md, Kernels; those of every CUDA launcher (device
// pointers, the CPU twin's semantics, checked preconditions, asynchronous on `stream`, no allocation) in docs/cuda.md.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/adamw_scalars.h"
#include "kernels/host_device.h"
#include "kernels/step_extras.h"

namespace crumb::cpu {

// torch.optim.AdamW (foreach=False, capturable=False), op for op in float32, scalars from
// adamw_scalars(): p *= decay; exp_avg = lerp(exp_avg, g, 1 - beta1);
// exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g; denom = sqrt(exp_avg_sq) / bc2_sqrt + eps;
// p += neg_step_size * exp_avg / denom. exp_avg and exp_avg_sq start as zeros (PyTorch's zeros_like).
// g is read as grad * extras.grad_scale, and extras.copy receives the updated parameters.
void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t count,
                const AdamWScalars& s, const StepExtras& extras = {});
// The same in float64 (torch.optim.AdamW on float64 parameters), without 16-bit copies (extras.copy is null).
void adamw_step(double* params, const double* grads, double* exp_avg, double* exp_avg_sq, std::size_t count,
                const AdamWScalarsOf<double>& s, const StepExtras& extras = {});

}  // namespace crumb::cpu

namespace crumb::cuda {

// One launch over the engine's flat parameter block, so it is the multi-tensor step; the semantics and
// layout of the CPU twin above.
void adamw_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t count,
                const AdamWScalars& s, const StepExtras& extras, cudaStream_t stream);

}  // namespace crumb::cuda
