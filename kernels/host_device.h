// Marks small inline functions that the CPU and CUDA kernels share, so both compute the same thing from
// one definition (nvcc compiles them for the device too; a C++ compiler sees plain inline functions).
#pragma once

#if defined(__CUDACC__)
#define CRUMB_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define CRUMB_HOST_DEVICE inline
#endif
