#include "engine/dist/communicator.h"

#include <cstdlib>

#include "engine/base/error.h"
#if CRUMB_HAVE_MPI
#include "engine/dist/mpi_communicator.h"
#endif
#if CRUMB_HAVE_NCCL
#include "engine/dist/nccl_communicator.h"
#endif

namespace crumb {

std::chrono::steady_clock::time_point Communicator::deadline() const {
  using Clock = std::chrono::steady_clock;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
}

void Communicator::timed_out(const char* what) const {
  CRUMB_FAIL("rank ", rank_, " of ", size_, ": ", what, " over all ranks did not finish in ", timeout_s_,
             " s: another rank failed or stalled (see its error; --dist-timeout sets the limit)");
}

bool launched_by_mpi() {
  // Open MPI's mpirun, MPICH's Hydra and Slurm (PMI), PMIx launchers.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var)) return true;
  return false;
}

std::unique_ptr<Communicator> connect_ranks(Device device, double timeout_s) {
  if (!launched_by_mpi()) return nullptr;
#if CRUMB_HAVE_MPI
  if (device == Device::CPU) return std::make_unique<MpiCommunicator>(timeout_s);
#if CRUMB_HAVE_NCCL
  return std::make_unique<cuda::NcclCommunicator>(std::make_unique<MpiCommunicator>(timeout_s), timeout_s);
#else
  CRUMB_FAIL("launched by mpirun on CUDA, but this build has no NCCL (rebuild where CMake finds libnccl, or use "
             "--device cpu)");
#endif
#else
  (void)device;
  (void)timeout_s;
  CRUMB_FAIL("launched by mpirun, but this build has no MPI (install openmpi-bin and libopenmpi-dev, then rerun "
             "tools/setup.sh)");
#endif
}

}  // namespace crumb
