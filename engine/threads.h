// The CPU thread count of all kernels (OpenMP loops and Eigen's GEMM).
#pragma once

namespace crumb {
void set_num_threads(int n);
int num_threads();
}  // namespace crumb
