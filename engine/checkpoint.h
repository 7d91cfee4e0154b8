// Checkpoints in the safetensors format, so PyTorch reads them with safetensors.torch.load_file +
// load_state_dict: tensors are named by parameter name (the state_dict keys), the optimizer's state by
// "optimizer.<state name>.<param name>" ("optimizer.momentum.*" for SGD, "optimizer.exp_avg.*" and
// "optimizer.exp_avg_sq.*" for AdamW), and "__metadata__" holds {"format": "crumb", "model": ...,
// "optimizer": "sgd" | "adamw", "optimizer_steps": "<n>"} (the last two only when an optimizer was
// saved; a file without "optimizer" holds SGD state). Float32 models only.
#pragma once
#include <string>

#include "engine/optimizer.h"
#include "engine/params.h"

namespace crumb {

// Writes the parameters (and the optimizer's kind, state blocks and step count when opt != nullptr) to
// path via "<path>.tmp" + rename, so a crash or a full disk never leaves a half-written file at path.
// Brings the host copies of the parameters and state up to date first (they live on the training device).
void save_checkpoint(const std::string& path, ParamStore& params, Optimizer* opt, const std::string& model_name);

// Loads into params and, when opt != nullptr, restores the optimizer to the state in the file: its step
// count and state blocks, or a fresh optimizer (0 steps, zero state) if the file holds none. opt must be
// the optimizer of params, of the kind the file names (else an error naming both). Momentum in the file
// is ignored by an SGD without momentum.
// Every parameter must be in the file with the same shape and no unknown tensors may be; the file is
// fully validated before anything is written, so on error params and opt are unchanged. Writes the
// host copies and the device's.
void load_checkpoint(const std::string& path, ParamStore& params, Optimizer* opt);

}  // namespace crumb
