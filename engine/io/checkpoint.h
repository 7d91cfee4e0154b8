// Checkpoints in the safetensors format. A checkpoint is two files:
// - <path>: the model's state_dict alone, tensors named by parameter and state name (PyTorch's keys:
//   "conv1.weight", "bn1.running_mean", "bn1.num_batches_tracked" as I64), so PyTorch loads it with
//   safetensors.torch.load_file + load_state_dict(strict=True), and Crumb loads PyTorch's;
// - <path>.optimizer (when an optimizer was saved): "optimizer.<state name>.<param name>" tensors
//   ("optimizer.momentum.*" for SGD, "optimizer.exp_avg.*" and "optimizer.exp_avg_sq.*" for AdamW).
// Both carry "__metadata__" {"format": "crumb", "model": ..., "optimizer": "sgd" | "adamw",
// "optimizer_steps": "<n>"}; equal step counts pair them. Files from before the split, with the optimizer
// tensors in <path>, still load. Parameters and optimizer state are in the model's master dtype: F32, or F64
// for a float64 model (--precision fp64); a model loads only a checkpoint of its own dtype.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/optim/optimizer.h"
#include "engine/run/params.h"

namespace crumb {

// Writes the parameters and state to path and, when opt != nullptr, the optimizer's kind, state blocks and
// step count to optimizer_path(path) (without an optimizer, a stale one there is removed). Each file is
// written to a temporary file of its own ("<file>.tmp.<pid>.<n>", created exclusively, never through a
// link), fsynced, renamed over the file and the rename fsynced: a crash, a kill or a full disk leaves the
// previous checkpoint intact, never a half-written one. The optimizer file that pairs with the model file
// on disk waits as previous_optimizer_path(path) until both new files are in place, so an interruption
// between the two still leaves a model file and an optimizer file of one step count. Non-finite values
// are refused before any file is touched.
// Brings the host copies of the parameters and state up to date first (they live on the training device).
// `run`: more "__metadata__" entries for both files (train records where the run stands and its flags).
using CheckpointMetadata = std::vector<std::pair<std::string, std::string>>;
void save_checkpoint(const std::string& path, ParamStore& params, Optimizer* opt, const std::string& model_name,
                     const CheckpointMetadata& run = {});
// save_checkpoint, and when it fails (disk full, folder gone) the same checkpoint to a new file of a name
// of its own, crumb-rescue-XXXXXX.safetensors (never another run's or another failed save's), in
// $TMPDIR (else /tmp), else path's folder, else the current folder: the first that takes it. Then throws
// one crumb::Error saying that the save failed and naming the file the weights went to (or that they are
// lost, and where it tried).
void save_checkpoint_or_rescue(const std::string& path, ParamStore& params, Optimizer* opt,
                               const std::string& model_name, const CheckpointMetadata& run);
// The "__metadata__" entries of the checkpoint's model file, in file order (its header and layout are
// validated; the tensor data is not read).
CheckpointMetadata checkpoint_metadata(const std::string& path);

// Loads into params and, when opt != nullptr, restores the optimizer to the state saved beside it: its step
// count and state blocks, or a fresh optimizer (0 steps, zero state) if none was saved. opt must be
// the optimizer of params, of the kind the file names (else an error naming both). Momentum in the file
// is ignored by an SGD without momentum.
// Every parameter must be in the file with the same shape and no unknown tensors may be; the file is
// fully validated before anything is written, so on error params and opt are unchanged. Writes the
// host copies and the device's.
void load_checkpoint(const std::string& path, ParamStore& params, Optimizer* opt);

// Where the optimizer state of the checkpoint at path is saved, and where the previous one waits while a
// save replaces the pair (a save interrupted between its two files leaves the model file paired with it).
std::string optimizer_path(const std::string& path);
std::string previous_optimizer_path(const std::string& path);
// Whether the checkpoint at path has an optimizer file (either of the two).
bool has_optimizer_file(const std::string& path);

// Throws crumb::Error unless a checkpoint can be written at path: its folder exists and is writable,
// the name is a file name short enough for the temporary names beside it, and neither path nor its
// optimizer file is a folder or special file (a symbolic link there is replaced, never followed).
// train checks --save with it before training; save_checkpoint checks again.
void check_checkpoint_path(const std::string& path);

}  // namespace crumb
