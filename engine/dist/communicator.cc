#include "engine/dist/communicator.h"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/error.h"
#include "engine/device/backend.h"

namespace crumb {
namespace {
// Never destroyed, like the device table: registered at load, read after main() has started.
std::vector<std::pair<std::string, CommunicatorFactory>>& communicators() {
  static auto* table = new std::vector<std::pair<std::string, CommunicatorFactory>>();
  return *table;
}
CommunicatorFactory find_communicator(const std::string& kind) {
  for (const auto& [name, factory] : communicators())
    if (name == kind) return factory;
  return nullptr;
}
}  // namespace

void register_communicator(const char* kind, CommunicatorFactory factory) {
  communicators().emplace_back(kind, factory);
}

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
  // The launcher is MPI's, and every communicator is bootstrapped over it.
  CRUMB_CHECK(find_communicator("mpi"), "launched by mpirun, but this build has no MPI (install openmpi-bin and "
                                        "libopenmpi-dev, then rerun tools/setup.sh)");
  const std::string kind = backend(device).communicator();
  const CommunicatorFactory make = find_communicator(kind);
  CRUMB_CHECK(make, "launched by mpirun on ", device_name(device), ", but this build has no ", kind,
              " communicator (rebuild where CMake finds lib", kind, ", or use --device cpu)");
  return make(timeout_s);
}

}  // namespace crumb
