#include "kernels/cuda/blas.h"

#include <type_traits>

#include "engine/base/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/reduce.h"
#include "kernels/elementwise.h"

namespace crumb::cuda {
namespace {

// cuBLAS's name for storage type T.
template <class T> constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, bf16>) return CUDA_R_16BF;
  if constexpr (std::is_same_v<T, f16>) return CUDA_R_16F;
  return CUDA_R_32F;
}

// cuBLAS is column-major. A row-major [r, c] array read column-major is its [c, r] transpose, so each
// row-major product C = A B is issued as C^T = B^T A^T on the same pointers, with the operands
// swapped and leading dimensions equal to the row-major row lengths. The wrappers below spell out
// each product in those column-major terms.

// C [m, n] (col-major, ldc) (=|+=) op(A) op(B), with op(A) [m, k] and op(B) [k, n]; A and B of storage
// type T, C of type C_, accumulated in float32.
template <class T, class C_>
void gemm(cublasHandle_t handle, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const T* a,
          int lda, const T* b, int ldb, C_* c, int ldc, bool accumulate, bool tf32) {
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // Only float operands have a TF32 choice; 16-bit ones run on tensor cores in CUBLAS_COMPUTE_32F.
  const cublasComputeType_t compute =
      std::is_same_v<T, float> && tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  // beta = 0 makes cuBLAS ignore C's old contents, garbage and NaN included, as write mode requires.
  CRUMB_CUBLAS_CHECK(cublasGemmEx(handle, op_a, op_b, m, n, k, &alpha, a, data_type<T>(), lda, b, data_type<T>(), ldb,
                                  &beta, c, data_type<C_>(), ldc, compute, CUBLAS_GEMM_DEFAULT));
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

template <class T>
void linear_forward(cublasHandle_t handle, T* y, const T* x, const T* w, const T* b, int n, int in, int out,
                    bool tf32) {
  check_shape(n, in, out, "linear_forward");
  // y^T [out, n] = w [out, in] . x^T [in, n]; w and x read column-major are w^T and x^T.
  gemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, w, in, x, in, y, out, false, tf32);
  if (b) bias_add_nchw(y, b, n, out, 1, stream_of(handle));
}

template <class T>
void linear_backward_data(cublasHandle_t handle, T* dx, const T* dy, const T* w, int n, int in, int out,
                          bool accumulate, bool tf32) {
  check_shape(n, in, out, "linear_backward_data");
  // dx^T [in, n] = w^T [in, out] . dy^T [out, n]
  gemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, w, in, dy, out, dx, in, accumulate, tf32);
}

template <class T>
void linear_backward_weight(cublasHandle_t handle, float* dw, float* db, const T* dy, const T* x, int n, int in,
                            int out, bool accumulate, bool tf32) {
  check_shape(n, in, out, "linear_backward_weight");
  // dw^T [in, out] = x^T [in, n] . dy [n, out]
  gemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, x, in, dy, out, dw, in, accumulate, tf32);
  if (db) bias_backward_nchw(db, dy, n, out, 1, accumulate, stream_of(handle));
}

#define CRUMB_INSTANTIATE(T)                                                                                       \
  template void linear_forward<T>(cublasHandle_t, T*, const T*, const T*, const T*, int, int, int, bool);         \
  template void linear_backward_data<T>(cublasHandle_t, T*, const T*, const T*, int, int, int, bool, bool);       \
  template void linear_backward_weight<T>(cublasHandle_t, float*, float*, const T*, const T*, int, int, int, bool, \
                                          bool);
CRUMB_INSTANTIATE(float)
CRUMB_INSTANTIATE(bf16)
CRUMB_INSTANTIATE(f16)
#undef CRUMB_INSTANTIATE

}  // namespace crumb::cuda
