#include "engine/dist/nccl_communicator.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "engine/cuda/cuda_backend.h"
#include "engine/base/error.h"
#include "engine/base/registry.h"
#include "kernels/cuda/check.h"

namespace crumb::cuda {
namespace {
void check_nccl(ncclResult_t r, const char* call) {
  CRUMB_CHECK(r == ncclSuccess, "NCCL: ", call, " failed: ", ncclGetErrorString(r));
}
#define CRUMB_NCCL_CHECK(call) check_nccl((call), #call)
}  // namespace

NcclCommunicator::NcclCommunicator(std::unique_ptr<MpiCommunicator> mpi, double timeout_s)
    : Communicator(mpi->rank(), mpi->size(), timeout_s), mpi_(std::move(mpi)) {
  try {
    CudaBackend& b = CudaBackend::of(backend(Device::CUDA, 0));
    b.activate();
    compute_ = b.compute();
    ncclUniqueId id;
    if (rank() == 0) CRUMB_NCCL_CHECK(ncclGetUniqueId(&id));
    mpi_->broadcast_host(&id, sizeof id);
    CRUMB_NCCL_CHECK(ncclCommInitRank(&comm_, size(), id, rank()));
    CRUMB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CRUMB_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    CRUMB_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  } catch (const std::exception& e) {
    // main() cannot stop the others yet (it has no communicator), and unwinding would run MPI_Finalize,
    // which waits for ranks that wait in ncclCommInitRank without a deadline: end every rank here.
    std::fprintf(stderr, "train: error: rank %d of %d: %s\n", rank(), size(), e.what());
    std::fflush(stderr);
    mpi_->abort(1);
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) ncclCommDestroy(comm_);
  cudaEventDestroy(done_);
  cudaEventDestroy(ready_);
  cudaStreamDestroy(stream_);
}

void NcclCommunicator::start_sum(void* p, std::size_t count, DType dtype) {
  CRUMB_CHECK(dtype == DType::F32 || dtype == DType::F64, "NCCL sums float32 or float64 gradients, not ",
              dtype_name(dtype));
  CRUMB_CUDA_CHECK(cudaEventRecord(ready_, compute_));
  CRUMB_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
  CRUMB_NCCL_CHECK(ncclAllReduce(p, p, count, dtype == DType::F32 ? ncclFloat32 : ncclFloat64, ncclSum, comm_, stream_));
  CRUMB_CUDA_CHECK(cudaEventRecord(done_, stream_));
  pending_ = true;
}

bool NcclCommunicator::poll_sums() {
  if (!pending_) return true;
  const cudaError_t r = cudaEventQuery(done_);
  if (r == cudaErrorNotReady) {
    // "Not ready" is also left in the runtime's last-error slot, where the next CRUMB_CUDA_CHECK_LAUNCH
    // (cudaGetLastError) would report it as that kernel's failure: clear it.
    cudaGetLastError();
    return false;
  }
  CRUMB_CUDA_CHECK(r);
  return true;
}

void NcclCommunicator::finish_sums() {
  if (!pending_) return;
  const auto until = deadline();
  while (!poll_sums()) {
    ncclResult_t async = ncclSuccess;
    CRUMB_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess || std::chrono::steady_clock::now() >= until) {
      // The sums' kernels may never finish: abort the communicator, or unwinding (cudaFree synchronises the
      // device) would hang before main() reaches MPI_Abort.
      ncclCommAbort(comm_);
      comm_ = nullptr;
      CRUMB_NCCL_CHECK(async);
      timed_out("the gradient sum");
    }
    std::this_thread::yield();
  }
  CRUMB_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
  pending_ = false;
}

CRUMB_ON_LOAD {
  register_communicator("nccl", [](double timeout_s) -> std::unique_ptr<Communicator> {
    return std::make_unique<NcclCommunicator>(std::make_unique<MpiCommunicator>(timeout_s), timeout_s);
  });
}

}  // namespace crumb::cuda
