#include "engine/base/threads.h"

#include <omp.h>

#include "engine/base/error.h"

namespace crumb {

void set_num_threads(int n) {
  CRUMB_CHECK(n >= 1, "thread count must be >= 1, got ", n);
  // The kernels split their work over OpenMP threads themselves (Eigen's own threading is off
  // because it allocates on every threaded GEMM).
  omp_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace crumb
