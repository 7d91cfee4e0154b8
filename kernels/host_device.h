// Marks small inline functions that the CPU and CUDA kernels share, so both compute the same thing from
// one definition (nvcc compiles them for the device too; a C++ compiler sees plain inline functions).
#pragma once

#if defined(__CUDACC__)
#define CRUMB_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define CRUMB_HOST_DEVICE inline
#endif

// The CUDA launchers' stream type, declared as CUDA's driver_types.h declares it: one header per kernel
// family declares both devices' functions, and a C++ compiler without CUDA's headers reads it as well.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
