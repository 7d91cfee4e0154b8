// The CPU's Communicator: MPI's world communicator. Gradient sums are MPI_Iallreduce calls in place on
// host memory; waits poll MPI_Testall against a deadline, so a rank that died or stalls makes the others
// fail with a message instead of hanging. Only the training thread calls MPI (MPI_THREAD_FUNNELED).
// Built when CMake finds MPI.
#pragma once
#include <mpi.h>

#include <vector>

#include "engine/dist/communicator.h"

namespace crumb {

class MpiCommunicator final : public Communicator {
 public:
  // Initialises MPI; every collective fails after timeout_s seconds.
  explicit MpiCommunicator(double timeout_s);
  ~MpiCommunicator() override;

  void start_sum(void* p, std::size_t count, DType dtype) override;
  bool poll_sums() override;
  void finish_sums() override;
  void sum_host(double* p, std::size_t count) override;
  void broadcast_host(void* p, std::size_t bytes) override;
  [[noreturn]] void abort(int code) override;

 private:
  static int world_rank();
  static int world_size();
  // Waits for every request in `requests` (then empties it); `what` names the collective in the error.
  void wait(std::vector<MPI_Request>& requests, const char* what);

  std::vector<MPI_Request> sums_;  // gradient sums started and not yet finished
};

}  // namespace crumb
