// The CPU thread count of all kernels.
#pragma once

namespace crumb {
void set_num_threads(int n);
int num_threads();
}  // namespace crumb
