#include "engine/cuda/recording.h"

#include <cuda_runtime.h>

#include "engine/cuda/context.h"
#include "kernels/cuda/check.h"

namespace crumb::cuda {
namespace {

class GraphRecording final : public Recording {
 public:
  explicit GraphRecording(cudaGraphExec_t exec) : exec_(exec) {}
  ~GraphRecording() override { cudaGraphExecDestroy(exec_); }
  GraphRecording(const GraphRecording&) = delete;
  GraphRecording& operator=(const GraphRecording&) = delete;
  void replay() override { CRUMB_CUDA_CHECK(cudaGraphLaunch(exec_, Context::get().compute())); }

 private:
  cudaGraphExec_t exec_;
};

// Ends the capture on `stream`; the captured graph, or null when the capture was invalidated (by a call
// that cannot be captured) or failed.
cudaGraph_t end_capture(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // capture errors are not sticky; clear them so later checks see only their own
    return nullptr;
  }
  return graph;
}

}  // namespace

std::unique_ptr<Recording> record(const std::function<void()>& enqueue) {
  const cudaStream_t stream = Context::get().compute();
  // Thread-local mode: only this thread's unsafe calls (a cudaMalloc, a synchronisation) invalidate the
  // capture; other threads (the loader) are not affected.
  CRUMB_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue();
  } catch (...) {
    cudaGraph_t graph = end_capture(stream);
    if (!graph) return nullptr;  // the call that threw refused capture: the caller runs it without
    cudaGraphDestroy(graph);
    throw;
  }
  cudaGraph_t graph = end_capture(stream);
  if (!graph) return nullptr;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (instantiated != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return std::make_unique<GraphRecording>(exec);
}

}  // namespace crumb::cuda
