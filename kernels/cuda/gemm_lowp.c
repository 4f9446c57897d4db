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

/* cuBLAS's types for 16-bit A and B of type lowp and C of c_dtype (f32 or
 * lowp); 0 when the pair is not one of those */
static int lowp_types(tg_dtype lowp, tg_dtype c_dtype, cudaDataType_t *ab, cudaDataType_t *ct) {
  if ((lowp != TG_BF16 && lowp != TG_F16) || (c_dtype != TG_F32 && c_dtype != lowp)) return 0;
  *ab = lowp == TG_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  *ct = c_dtype == TG_F32 ? CUDA_R_32F : *ab;
  return 1;
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
  cudaDataType_t ab, ct;
  if (m < 0 || n < 0 || k < 0 || !lowp_types(lowp, c_dtype, &ab, &ct))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (k == 0) return scale_only(handle, c_dtype, lowp, m, n, beta, C, ldc);
  const cublasOperation_t opA = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  return cublasGemmEx(handle, opB, opA, n, m, k, &alpha, B, ab, ldb, A, ab, lda,
                      &beta, C, ct, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t tg_cuda_gemm_lowp_strided(cublasHandle_t handle, tg_dtype lowp, int transa,
                                         int transb, int m, int n, int k, float alpha,
                                         const uint16_t *A, int lda, long long stride_a,
                                         const uint16_t *B, int ldb, long long stride_b,
                                         float beta, tg_dtype c_dtype, void *C, int ldc,
                                         long long stride_c, int batch) {
  cudaDataType_t ab, ct;
  if (m < 0 || n < 0 || k <= 0 || batch < 0 || !lowp_types(lowp, c_dtype, &ab, &ct))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  const cublasOperation_t opA = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  return cublasGemmStridedBatchedEx(handle, opB, opA, n, m, k, &alpha, B, ab, ldb, stride_b, A,
                                    ab, lda, stride_a, &beta, C, ct, ldc, stride_c, batch,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

/* dst (rows x dcols, ld dcols) = src (rows x cols, ld ld) with zero columns
 * cols..dcols-1, or dst (drows x cols) = src with zero rows after `rows`:
 * zero everything, then copy the rows (2-byte elements). */
static cudaError_t pad_copy(uint16_t *dst, int drows, int dcols, const uint16_t *src,
                            int rows, int cols, int ld, cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(dst, 0, sizeof(uint16_t) * (size_t)drows * dcols, stream);
  if (e != cudaSuccess) return e;
  return cudaMemcpy2DAsync(dst, sizeof(uint16_t) * (size_t)dcols, src,
                           sizeof(uint16_t) * (size_t)ld, sizeof(uint16_t) * (size_t)cols,
                           (size_t)rows, cudaMemcpyDeviceToDevice, stream);
}

cublasStatus_t tg_cuda_gemm_lowp_aligned(cublasHandle_t handle, tg_dtype lowp,
                                         int transa, int transb, int m, int n, int k,
                                         float alpha, const uint16_t *A, int lda,
                                         const uint16_t *B, int ldb, float beta,
                                         tg_dtype c_dtype, void *C, int ldc,
                                         uint16_t *work) {
  if (k <= 0 || k % 8 == 0 || m <= 0 || n <= 0 || !work)
    return tg_cuda_gemm_lowp(handle, lowp, transa, transb, m, n, k, alpha, A, lda, B, ldb,
                             beta, c_dtype, C, ldc);
  cudaStream_t stream = NULL;
  cublasStatus_t st = cublasGetStream(handle, &stream);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  const int k8 = (k + 7) / 8 * 8;
  uint16_t *Ap = work, *Bp = work + (size_t)k8 * m; /* (m, k8) or (k8, m); B likewise */
  /* op(A) (m, k): stored (m, k) -> (m, k8) with zero columns, or (k, m) ->
   * (k8, m) with zero rows; op(B) (k, n) the other way round */
  cudaError_t e = transa ? pad_copy(Ap, k8, m, A, k, m, lda, stream)
                         : pad_copy(Ap, m, k8, A, m, k, lda, stream);
  if (e == cudaSuccess)
    e = transb ? pad_copy(Bp, n, k8, B, n, k, ldb, stream)
               : pad_copy(Bp, k8, n, B, k, n, ldb, stream);
  if (e != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  return tg_cuda_gemm_lowp(handle, lowp, transa, transb, m, n, k8, alpha, Ap,
                           transa ? m : k8, Bp, transb ? k8 : n, beta, c_dtype, C, ldc);
}
