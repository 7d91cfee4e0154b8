// Linear layers on cuBLAS. Shapes and write modes are those of the CPU twins in kernels/linear.h:
// x [n, in], w [out, in] (PyTorch layout), b [out], y [n, out], all row-major float.
// The handle carries the stream (cublasSetStream, set once by the engine) and must keep its default
// pointer mode (host) and math mode; the bias kernels run on the handle's stream too. Setting the stream per call
// would reset any workspace the engine gave cuBLAS with cublasSetWorkspace.
// GEMMs compute in plain FP32 (CUBLAS_COMPUTE_32F), so results match the CPU to float rounding; with tf32
// they may round their operands to TF32 on tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32), faster and less exact.
#pragma once
#include <cublas_v2.h>

namespace crumb::cuda {

// y = x w^T + b (b may be null). The bias is a second, elementwise pass (bias_add_nchw with hw = 1):
// it needs no workspace, where folding it into the GEMM would need a ones vector.
void linear_forward(cublasHandle_t handle, float* y, const float* x, const float* w, const float* b, int n, int in,
                    int out, bool tf32 = false);
// dx [n, in] (=|+=) dy [n, out] * w [out, in]
void linear_backward_data(cublasHandle_t handle, float* dx, const float* dy, const float* w, int n, int in, int out,
                          bool accumulate, bool tf32 = false);
// dw [out, in] (=|+=) dy^T x; db [out] (=|+=) sum over n of dy (db may be null)
void linear_backward_weight(cublasHandle_t handle, float* dw, float* db, const float* dy, const float* x, int n, int in,
                            int out, bool accumulate, bool tf32 = false);

}  // namespace crumb::cuda
