// CUDA graphs for the executor: stream capture of one run's work on the compute stream, instantiated
// once and launched as one unit (engine/backend.h's Recording).
#pragma once
#include <functional>
#include <memory>

#include "engine/backend.h"

namespace crumb::cuda {

std::unique_ptr<Recording> record(const std::function<void()>& enqueue);

}  // namespace crumb::cuda
