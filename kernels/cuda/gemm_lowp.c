/*
 * taskgrad layer 1: row-major GEMM with bf16 / fp16 operands on the GPU,
 * through cublasGemmEx with CUBLAS_COMPUTE_32F, the device twin of
 * tg_cpu_gemm_lowp (precision.h).  Plain C, compiled by the host compiler.
 *
 * Design note
 * -----------
 * The row-major to column-major trick of gemm_cublas.c: C^T = op(B)^T op(A)^T,
 * i.e. the operands swap places and keep their transpose flags and leading
 * dimensions.  CUBLAS_COMPUTE_32F with CUDA_R_16BF / CUDA_R_16F operands
 * multiplies the 16-bit inputs exactly and sums in fp32 (on tensor cores),
 * writing C as fp32 or rounding it once to the 16-bit type: the rounding
 * points of the CPU kernel.  alpha and beta are host floats (the scale type
 * of COMPUTE_32F; the handle's default pointer mode).
 *
 * k == 0 (C = beta C) is done without cuBLAS for the reasons given in
 * gemm_cublas.c (an empty operand may carry ld == 0): tg_cuda_fill /
 * tg_cuda_scale for an f32 C, tg_cuda_scale_lowp for a 16-bit one, on the
 * handle's stream.
 */
#include "taskgrad/kernels_cuda.h"
#include "taskgrad/kernels_cuda_precision.h"

static cublasStatus_t scale_only(cublasHandle_t handle, tg_dtype c_dtype,
                                 tg_dtype lowp, int m, int n, float beta,
                                 void *C, int ldc) {
  cudaStream_t stream = NULL;
  cublasStatus_t st = cublasGetStream(handle, &stream);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  cudaError_t err = cudaSuccess;
  if (c_dtype != TG_F32) {
    if (beta != 1.0f) err = tg_cuda_scale_lowp(lowp, m, n, (uint16_t *)C, ldc, beta, stream);
  } else if (beta == 0.0f) {
    err = tg_cuda_fill(m, n, (float *)C, ldc, 0.0f, stream);
  } else if (beta != 1.0f) {
    err = tg_cuda_scale(m, n, (float *)C, ldc, beta, stream);
  }
  return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t tg_cuda_gemm_lowp(cublasHandle_t handle, tg_dtype lowp,
                                 int transa, int transb, int m, int n, int k,
                                 float alpha,
                                 const uint16_t *A, /* (m, k) or (k, m), lda */
                                 int lda,
                                 const uint16_t *B, /* (k, n) or (n, k), ldb */
                                 int ldb, float beta, tg_dtype c_dtype,
                                 void *C, /* (m, n), ldc, f32 or lowp */
                                 int ldc) {
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (lowp != TG_BF16 && lowp != TG_F16) return CUBLAS_STATUS_INVALID_VALUE;
  if (c_dtype != TG_F32 && c_dtype != lowp) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (k == 0) return scale_only(handle, c_dtype, lowp, m, n, beta, C, ldc);
  const cudaDataType_t ab = lowp == TG_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  const cudaDataType_t ct = c_dtype == TG_F32 ? CUDA_R_32F : ab;
  const cublasOperation_t opA = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  return cublasGemmEx(handle, opB, opA, n, m, k, &alpha, B, ab, ldb, A, ab, lda,
                      &beta, C, ct, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
