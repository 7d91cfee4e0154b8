#include "engine/dist/mpi_communicator.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <thread>

#include "engine/base/error.h"
#include "engine/base/registry.h"

namespace crumb {
namespace {
// MPI_Init must precede the base class's rank and size: a function-local helper runs it first.
void init_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    CRUMB_CHECK(provided >= MPI_THREAD_FUNNELED, "the MPI library does not support MPI_THREAD_FUNNELED");
  }
}

MPI_Datatype mpi_type(DType t) {
  CRUMB_CHECK(t == DType::F32 || t == DType::F64, "MPI sums float32 or float64 gradients, not ", dtype_name(t));
  return t == DType::F32 ? MPI_FLOAT : MPI_DOUBLE;
}

int mpi_count(std::size_t count) {
  CRUMB_CHECK(count <= static_cast<std::size_t>(INT_MAX), "an MPI message of ", count,
              " elements is too long (lower --bucket-cap)");
  return static_cast<int>(count);
}
}  // namespace

int MpiCommunicator::world_rank() {
  init_mpi();
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int MpiCommunicator::world_size() {
  init_mpi();
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

MpiCommunicator::MpiCommunicator(double timeout_s)
    : Communicator(world_rank(), world_size(), timeout_s) {}

MpiCommunicator::~MpiCommunicator() { MPI_Finalize(); }

void MpiCommunicator::start_sum(void* p, std::size_t count, DType dtype) {
  sums_.emplace_back();
  MPI_Iallreduce(MPI_IN_PLACE, p, mpi_count(count), mpi_type(dtype), MPI_SUM, MPI_COMM_WORLD, &sums_.back());
}

bool MpiCommunicator::poll_sums() {
  int done = 1;
  if (!sums_.empty()) MPI_Testall(static_cast<int>(sums_.size()), sums_.data(), &done, MPI_STATUSES_IGNORE);
  return done != 0;
}

void MpiCommunicator::finish_sums() { wait(sums_, "the gradient sum"); }

void MpiCommunicator::sum_host(double* p, std::size_t count) {
  std::vector<MPI_Request> r(1);
  MPI_Iallreduce(MPI_IN_PLACE, p, mpi_count(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r[0]);
  wait(r, "the sum of the batch's loss");
}

void MpiCommunicator::broadcast_host(void* p, std::size_t bytes) {
  std::vector<MPI_Request> r(1);
  MPI_Ibcast(p, mpi_count(bytes), MPI_BYTE, 0, MPI_COMM_WORLD, &r[0]);
  wait(r, "the broadcast from rank 0");
}

void MpiCommunicator::wait(std::vector<MPI_Request>& requests, const char* what) {
  const auto until = deadline();
  for (int done = 0; !requests.empty();) {
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) break;
    if (std::chrono::steady_clock::now() >= until) timed_out(what);
    std::this_thread::yield();
  }
  requests.clear();
}

void MpiCommunicator::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest if it ever did
}

CRUMB_ON_LOAD {
  register_communicator("mpi", [](double timeout_s) -> std::unique_ptr<Communicator> {
    return std::make_unique<MpiCommunicator>(timeout_s);
  });
}

}  // namespace crumb
