/*
 * cuda_emu: the cuBLAS calls of kernels/cuda on OpenBLAS (test_ops_emu
 * only), in C++ for the stand-in 16-bit conversions of cuda_bf16.h and
 * cuda_fp16.h.  See include/cublas_v2.h for the mapping; in short, the same
 * column-major call on cblas_sgemm after cuBLAS's own argument checks, and
 * for cublasGemmEx the 16-bit operands widened exactly to fp32 first.
 */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"

struct tg_emu_cublas {
  cudaStream_t stream;
};

extern "C" {

static int g_gemmex_calls, g_gemmex_last_k;

int tg_emu_gemmex_calls(void) { return g_gemmex_calls; }
int tg_emu_gemmex_last_k(void) { return g_gemmex_last_k; }

cublasStatus_t cublasCreate(cublasHandle_t *handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = (cublasHandle_t)calloc(1, sizeof **handle);
  return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  free(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

static int max1(int x) { return x > 1 ? x : 1; }

/* cuBLAS's checks of a gemm call (column-major: op(A) is m x k) */
static cublasStatus_t check_gemm(cublasHandle_t h, cublasOperation_t ta,
                                 cublasOperation_t tb, int m, int n, int k, int lda,
                                 int ldb, int ldc) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if ((ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < max1(ta == CUBLAS_OP_N ? m : k) || ldb < max1(tb == CUBLAS_OP_N ? k : n) ||
      ldc < max1(m))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

static enum CBLAS_TRANSPOSE op(cublasOperation_t t) {
  return t == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k,
                           const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C,
                           int ldc) {
  cublasStatus_t st = check_gemm(handle, transa, transb, m, n, k, lda, ldb, ldc);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  cblas_sgemm(CblasColMajor, op(transa), op(transb), m, n, k, *alpha, A, lda, B, ldb,
              *beta, C, ldc);
  return CUBLAS_STATUS_SUCCESS;
}

static float widen(cudaDataType_t t, uint16_t h) {
  return t == CUDA_R_16BF ? __bfloat162float(__ushort_as_bfloat16(h))
                          : __half2float(__ushort_as_half(h));
}

/* (rows, cols) column-major 16-bit matrix with ld -> compact fp32 */
static float *widen_matrix(cudaDataType_t t, const uint16_t *src, int rows, int cols,
                           int ld) {
  float *dst = (float *)malloc(sizeof(float) * (size_t)max1(rows) * (size_t)max1(cols));
  if (!dst) return NULL;
  for (int c = 0; c < cols; c++)
    for (int r = 0; r < rows; r++)
      dst[(size_t)c * rows + r] = widen(t, src[(size_t)c * ld + r]);
  return dst;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long strideA, const float *B, int ldb,
                                         long long strideB, const float *beta, float *C,
                                         int ldc, long long strideC, int batchCount) {
  if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
  for (int i = 0; i < batchCount; i++) {
    cublasStatus_t st = cublasSgemm(handle, transa, transb, m, n, k, alpha, A + i * strideA,
                                    lda, B + i * strideB, ldb, beta, C + i * strideC, ldc);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t Atype,
                            int lda, const void *B, cudaDataType_t Btype, int ldb,
                            const void *beta, void *C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  (void)algo;
  cublasStatus_t st = check_gemm(handle, transa, transb, m, n, k, lda, ldb, ldc);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (computeType != CUBLAS_COMPUTE_32F || Atype != Btype ||
      (Atype != CUDA_R_16BF && Atype != CUDA_R_16F) ||
      (Ctype != CUDA_R_32F && Ctype != Atype))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  g_gemmex_calls++;
  g_gemmex_last_k = k;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const float a = *(const float *)alpha, b = *(const float *)beta;
  const int ar = transa == CUBLAS_OP_N ? m : k, ac = transa == CUBLAS_OP_N ? k : m;
  const int br = transb == CUBLAS_OP_N ? k : n, bc = transb == CUBLAS_OP_N ? n : k;
  float *Aw = widen_matrix(Atype, (const uint16_t *)A, ar, ac, lda);
  float *Bw = widen_matrix(Btype, (const uint16_t *)B, br, bc, ldb);
  float *Cw = Ctype == CUDA_R_32F ? NULL : (float *)malloc(sizeof(float) * (size_t)m * n);
  if (!Aw || !Bw || (Ctype != CUDA_R_32F && !Cw)) {
    free(Aw);
    free(Bw);
    free(Cw);
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  if (Ctype == CUDA_R_32F) {
    cblas_sgemm(CblasColMajor, op(transa), op(transb), m, n, k, a, Aw, max1(ar), Bw,
                max1(br), b, (float *)C, ldc);
  } else { /* C read as fp32 (beta != 0), the result rounded once */
    uint16_t *C16 = (uint16_t *)C;
    for (int c = 0; c < n; c++)
      for (int r = 0; r < m; r++)
        Cw[(size_t)c * m + r] = b == 0.0f ? 0.0f : widen(Ctype, C16[(size_t)c * ldc + r]);
    cblas_sgemm(CblasColMajor, op(transa), op(transb), m, n, k, a, Aw, max1(ar), Bw,
                max1(br), b, Cw, m);
    for (int c = 0; c < n; c++)
      for (int r = 0; r < m; r++) {
        const float v = Cw[(size_t)c * m + r];
        C16[(size_t)c * ldc + r] =
            Ctype == CUDA_R_16BF ? __bfloat16_as_ushort(__float2bfloat16_rn(v))
                                 : __half_as_ushort(__float2half_rn(v));
      }
  }
  free(Aw);
  free(Bw);
  free(Cw);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const void *alpha, const void *A, cudaDataType_t Atype, int lda, long long strideA,
    const void *B, cudaDataType_t Btype, int ldb, long long strideB, const void *beta, void *C,
    cudaDataType_t Ctype, int ldc, long long strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const size_t ce = Ctype == CUDA_R_32F ? 4 : 2; /* A and B are 16-bit (cublasGemmEx) */
  for (int i = 0; i < batchCount; i++) {
    cublasStatus_t st = cublasGemmEx(
        handle, transa, transb, m, n, k, alpha, (const uint16_t *)A + i * strideA, Atype, lda,
        (const uint16_t *)B + i * strideB, Btype, ldb, beta, (char *)C + ce * i * strideC,
        Ctype, ldc, computeType, algo);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
  }
  return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
