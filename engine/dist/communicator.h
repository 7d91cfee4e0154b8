// The ranks of a data-parallel run and the few collectives training needs. One process per rank; every
// rank calls the same collectives in the same order. MPI serves the CPU (engine/dist/mpi_communicator.h) and
// NCCL serves CUDA devices (engine/dist/nccl_communicator.h, bootstrapped over MPI); each registers itself
// by its kind, and connect_ranks() takes the one the device's backend names (Backend::communicator). A collective that does not finish by the deadline is an error naming the rank, never a hang:
// the caller prints it and abort() ends every rank.
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>

#include "engine/base/tensor.h"

namespace crumb {

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Starts summing `count` elements at p (the device's memory) over all ranks, in place. p must stay
  // untouched until finish_sums() returns.
  virtual void start_sum(void* p, std::size_t count, DType dtype) = 0;
  // Lets started sums advance without waiting (MPI progresses non-blocking collectives only inside its
  // calls); true when all of them have completed.
  virtual bool poll_sums() = 0;
  // Ends every started sum. On the CPU it waits for them; on CUDA the compute stream waits, so work
  // enqueued later sees the sums.
  virtual void finish_sums() = 0;
  // Blocking sum of host doubles over all ranks, in place (losses, counts, flags).
  virtual void sum_host(double* p, std::size_t count) = 0;
  // Copies `bytes` of host memory at p from rank 0 to every rank.
  virtual void broadcast_host(void* p, std::size_t bytes) = 0;
  // Ends the processes of every rank with `code`; the caller has said why.
  [[noreturn]] virtual void abort(int code) = 0;
  // Every rank has found the same error and says so itself: each can end cleanly, nothing to abort.
  void fail_together() { failed_together_ = true; }
  bool failed_together() const { return failed_together_; }

 protected:
  Communicator(int rank, int size, double timeout_s) : rank_(rank), size_(size), timeout_s_(timeout_s) {}
  // When a collective started now must have finished.
  std::chrono::steady_clock::time_point deadline() const;
  // The error of a collective (`what`) that missed its deadline.
  [[noreturn]] void timed_out(const char* what) const;

 private:
  int rank_, size_;
  double timeout_s_;
  bool failed_together_ = false;
};

// Connects this process to the ranks it was launched among, with collectives that fail after timeout_s
// seconds. Each communicator registers its factory at load time (CRUMB_ON_LOAD in its own file) under
// the kind Backend::communicator() names; "mpi" is also the bootstrap the others connect through.
using CommunicatorFactory = std::unique_ptr<Communicator> (*)(double timeout_s);
void register_communicator(const char* kind, CommunicatorFactory factory);

// Whether this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx).
bool launched_by_mpi();
// The ranks this process was launched among, for training on `device` (device 0 of its kind), over the
// communicator its backend names; null when it was not launched by MPI. A build without MPI (or, for
// CUDA, without NCCL) that was launched by MPI is an error naming what to rebuild with.
std::unique_ptr<Communicator> connect_ranks(Device device, double timeout_s);

}  // namespace crumb
