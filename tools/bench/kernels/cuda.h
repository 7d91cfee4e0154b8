// The CUDA benchmarks: the same cases on the GPU, the engine's CUDA rows next to cuDNN's and cuBLAS's
// calls for the same work, named "cuda/<op>/<suite>/<layer>/<implementation>". Built only with the CUDA
// backend.
#pragma once
#include <vector>

#include "tools/bench/kernels/cases.h"

namespace crumb::bench {

// Registers the CUDA benchmarks and records the GPU and its peaks in the JSON context. Returns false,
// having printed one line saying why, when no CUDA device can be used.
bool register_cuda(const std::vector<Case>& cases);

}  // namespace crumb::bench
