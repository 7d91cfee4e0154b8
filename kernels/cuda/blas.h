// Linear layers on cuBLAS. Shapes and write modes are those of the CPU twins in kernels/linear.h:
// x [n, in], w [out, in] (PyTorch layout), b [out], y [n, out], all row-major float.
// The handle carries the stream (cublasSetStream, set once by the engine) and must keep its default
// pointer mode (host) and math mode; the bias kernels run on the handle's stream too. Setting the stream per call
// would reset any workspace the engine gave cuBLAS with cublasSetWorkspace.
// Float GEMMs compute in plain FP32 (CUBLAS_COMPUTE_32F), so results match the CPU to float rounding; with
// tf32 they may round their operands to TF32 on tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32), faster and
// less exact.
#pragma once
#include <cublas_v2.h>

#include "kernels/half.h"

namespace crumb::cuda {

// Each is defined for T = float and the 16-bit storage types bf16 and f16 (kernels/half.h). A 16-bit
// product reads and writes its activations and weights in T on tensor cores and accumulates in float32
// (CUBLAS_COMPUTE_32F); tf32 concerns float only. The parameter gradients dw and db are float32 in
// every case: a 16-bit run's weight gradient is written (or added, beta = 1) by the GEMM in float32,
// never rounded to 16 bits, so micro-batches accumulate it as float32 training does.

// y = x w^T + b (b may be null). The bias is a second, elementwise pass (bias_add_nchw with hw = 1):
// it needs no workspace, where folding it into the GEMM would need a ones vector.
template <class T>
void linear_forward(cublasHandle_t handle, T* y, const T* x, const T* w, const T* b, int n, int in, int out,
                    bool tf32 = false);
// dx [n, in] (=|+=) dy [n, out] * w [out, in]
template <class T>
void linear_backward_data(cublasHandle_t handle, T* dx, const T* dy, const T* w, int n, int in, int out,
                          bool accumulate, bool tf32 = false);
// dw [out, in] (=|+=) dy^T x; db [out] (=|+=) sum over n of dy (db may be null), both float32
template <class T>
void linear_backward_weight(cublasHandle_t handle, float* dw, float* db, const T* dy, const T* x, int n, int in,
                            int out, bool accumulate, bool tf32 = false);

}  // namespace crumb::cuda
