// The CUDA implementations of the ops: the twins of the cpu_f32 functions in engine/ops/*.cc, same
// inputs, outputs and write modes, float32 only. Kernels come from kernels/cuda (custom kernels, cuBLAS,
// cuDNN) and run on the compute stream of cuda::Context.
#pragma once
#include "engine/backend.h"

namespace crumb::cuda {

// Throws crumb::Error naming the layer when the op has no CUDA implementation or the graph is not float32.
CompiledStep compile_step(const Graph& g, const Node& n, int max_batch);

}  // namespace crumb::cuda
