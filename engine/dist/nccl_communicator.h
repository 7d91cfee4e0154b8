// The CUDA device's Communicator: gradient sums are ncclAllReduce calls in place on device memory, on a
// stream of their own, so they overlap the backward kernels still queued on the compute stream. Each
// sum waits (an event) for the compute work enqueued before it; finish_sums() makes the compute stream
// wait for all of them, after polling them against the deadline (a stalled peer is an error, and the
// NCCL communicator is aborted, never a hang). MPI bootstraps NCCL (rank 0's ncclUniqueId) and serves
// the host collectives. Each process uses its CUDA device 0: give each rank its own GPU with
// CUDA_VISIBLE_DEVICES (docs/distributed.md). Built when CUDA, NCCL and MPI are found.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>

#include "engine/dist/mpi_communicator.h"

namespace crumb::cuda {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<MpiCommunicator> mpi, double timeout_s);
  ~NcclCommunicator() override;

  void start_sum(void* p, std::size_t count, DType dtype) override;
  bool poll_sums() override;
  void finish_sums() override;
  void sum_host(double* p, std::size_t count) override { mpi_->sum_host(p, count); }
  void broadcast_host(void* p, std::size_t bytes) override { mpi_->broadcast_host(p, bytes); }
  [[noreturn]] void abort(int code) override { mpi_->abort(code); }

 private:
  std::unique_ptr<MpiCommunicator> mpi_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t compute_ = nullptr, stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;  // compute work before a sum; the last sum enqueued
  bool pending_ = false;                           // sums were started since the last finish_sums()
};

}  // namespace crumb::cuda
