/*
 * taskgrad layer 1: row-major GEMM on the GPU through cuBLAS (column-major),
 * the device twin of tg_cpu_gemm in kernels_cpu.h.  Plain C, compiled by the
 * host compiler and linked with cuBLAS.
 *
 * Design note
 * -----------
 * A row-major (r, c) matrix with leading dimension ld is, read column-major,
 * its transpose: a (c, r) matrix with the same ld.  So instead of
 *   C(m, n) = alpha op(A) op(B) + beta C            (row-major)
 * we ask cuBLAS for
 *   C^T(n, m) = alpha op(B)^T op(A)^T + beta C^T    (column-major),
 * i.e. cublasSgemm(h, opB, opA, n, m, k, &alpha, B, ldb, A, lda, &beta,
 * C, ldc): the operands swap places, the transpose flags stay attached to
 * their matrices, and every leading dimension is passed unchanged.  cuBLAS's
 * own checks then read: ldb >= (transb ? k : n), lda >= (transa ? m : k),
 * ldc >= n, exactly the row-major requirements.
 *
 * Scalars are host pointers (the handle's default pointer mode; the caller
 * must not have switched it to CUBLAS_POINTER_MODE_DEVICE).  The handle must
 * already be bound to the caller's stream (StarPU's
 * starpu_cublas_get_local_handle() is); nothing here synchronises.
 * Precision: plain FP32 (CUBLAS_DEFAULT_MATH does not use TF32 tensor
 * cores), so results match the CPU up to summation order.
 *
 * Empty problems:
 *  - m == 0 or n == 0: C is empty, nothing to do (no cuBLAS call).
 *  - k == 0: op(A) op(B) is an (m, n) zero matrix, so C = beta C, and
 *    beta == 0 makes C write-only (zeros, even over NaN), as in the
 *    reference BLAS.  We do this ourselves with tg_cuda_fill / tg_cuda_scale
 *    on the handle's stream rather than calling cuBLAS: a row-major (n, 0) or
 *    (0, k) operand may carry ld == 0, which cuBLAS rejects
 *    (CUBLAS_STATUS_INVALID_VALUE: it wants ld >= max(1, rows)), and whether
 *    cuBLAS applies beta when k == 0 is not something we want to depend on.
 */
#include "taskgrad/kernels_cuda.h"

cublasStatus_t tg_cuda_gemm(cublasHandle_t handle, int transa, int transb,
                            int m, int n, int k, float alpha,
                            const float *A, /* (m, k) or (k, m) if transa, lda */
                            int lda,
                            const float *B, /* (k, n) or (n, k) if transb, ldb */
                            int ldb, float beta,
                            float *C, /* (m, n), ldc */
                            int ldc) {
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (k == 0) {
    cudaStream_t stream = NULL;
    cublasStatus_t st = cublasGetStream(handle, &stream);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    cudaError_t err = cudaSuccess;
    if (beta == 0.0f)
      err = tg_cuda_fill(m, n, C, ldc, 0.0f, stream);
    else if (beta != 1.0f)
      err = tg_cuda_scale(m, n, C, ldc, beta, stream);
    return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                              : CUBLAS_STATUS_EXECUTION_FAILED;
  }
  const cublasOperation_t opA = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  return cublasSgemm(handle, opB, opA, n, m, k, &alpha, B, ldb, A, lda, &beta,
                     C, ldc);
}

cublasStatus_t tg_cuda_gemm_strided(cublasHandle_t handle, int transa, int transb, int m,
                                    int n, int k, float alpha, const float *A, int lda,
                                    long long stride_a, const float *B, int ldb,
                                    long long stride_b, float beta, float *C, int ldc,
                                    long long stride_c, int batch) {
  if (m < 0 || n < 0 || k <= 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const cublasOperation_t opA = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  return cublasSgemmStridedBatched(handle, opB, opA, n, m, k, &alpha, B, ldb, stride_b, A,
                                   lda, stride_a, &beta, C, ldc, stride_c, batch);
}
