#include "engine/threads.h"

#include <omp.h>

#include <Eigen/Core>

#include "engine/error.h"

namespace crumb {

void set_num_threads(int n) {
  CRUMB_CHECK(n >= 1, "thread count must be >= 1, got ", n);
  omp_set_num_threads(n);
  Eigen::setNbThreads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace crumb
