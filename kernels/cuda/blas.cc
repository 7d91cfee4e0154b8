#include "kernels/cuda/blas.h"

#include "engine/base/error.h"
#include "kernels/cuda/check.h"
#include "kernels/elementwise.h"
#include "kernels/cuda/reduce.h"

namespace crumb::cuda {
namespace {

// cuBLAS is column-major. A row-major [r, c] array read column-major is its [c, r] transpose, so each
// row-major product C = A B is issued as C^T = B^T A^T on the same pointers, with the operands
// swapped and leading dimensions equal to the row-major row lengths. The wrappers below spell out
// each product in those column-major terms.

// C [m, n] (col-major, ldc) (=|+=) op(A) op(B), with op(A) [m, k] and op(B) [k, n].
void gemm(cublasHandle_t handle, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const float* a,
          int lda, const float* b, int ldb, float* c, int ldc, bool accumulate, bool tf32) {
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // beta = 0 makes cuBLAS ignore C's old contents, garbage and NaN included, as write mode requires.
  CRUMB_CUBLAS_CHECK(cublasGemmEx(handle, op_a, op_b, m, n, k, &alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb, &beta, c,
                                  CUDA_R_32F, ldc, tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

cudaStream_t stream_of(cublasHandle_t handle) {
  cudaStream_t stream = nullptr;
  CRUMB_CUBLAS_CHECK(cublasGetStream(handle, &stream));
  return stream;
}

void check_shape(int n, int in, int out, const char* what) {
  CRUMB_CHECK(n >= 1 && in >= 1 && out >= 1, what, ": bad shape n=", n, " in=", in, " out=", out);
}

}  // namespace

void linear_forward(cublasHandle_t handle, float* y, const float* x, const float* w, const float* b, int n, int in,
                    int out, bool tf32) {
  check_shape(n, in, out, "linear_forward");
  // y^T [out, n] = w [out, in] . x^T [in, n]; w and x read column-major are w^T and x^T.
  gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w, in, x, in, y, out, false, tf32);
  if (b) bias_add_nchw(y, b, n, out, 1, stream_of(handle));
}

void linear_backward_data(cublasHandle_t handle, float* dx, const float* dy, const float* w, int n, int in, int out,
                          bool accumulate, bool tf32) {
  check_shape(n, in, out, "linear_backward_data");
  // dx^T [in, n] = w^T [in, out] . dy^T [out, n]
  gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, w, in, dy, out, dx, in, accumulate, tf32);
}

void linear_backward_weight(cublasHandle_t handle, float* dw, float* db, const float* dy, const float* x, int n, int in,
                            int out, bool accumulate, bool tf32) {
  check_shape(n, in, out, "linear_backward_weight");
  // dw^T [in, out] = x^T [in, n] . dy [n, out]
  gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, x, in, dy, out, dw, in, accumulate, tf32);
  if (db) bias_backward_nchw(db, dy, n, out, 1, accumulate, stream_of(handle));
}

}  // namespace crumb::cuda
