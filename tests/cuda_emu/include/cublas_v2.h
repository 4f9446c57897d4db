/*
 * cuda_emu: stand-in for <cublas_v2.h> (test_ops_emu only): the calls
 * kernels/cuda makes, mapped onto OpenBLAS by emu_cublas.c.
 *
 * Design note
 * -----------
 * cuBLAS is column-major; cublasSgemm maps to cblas_sgemm(CblasColMajor)
 * with the same transposes, dimensions and leading dimensions, after the
 * argument checks cuBLAS documents (ld >= max(1, rows), ...), so a call that
 * the real library would reject is rejected here too.  cublasGemmEx takes
 * bf16 or fp16 A and B and COMPUTE_32F: the 16-bit inputs are widened to
 * fp32 (exact, as the tensor cores multiply them exactly) and summed in
 * fp32; a 16-bit C is read as fp32 and rounded once at the end.  Streams
 * are recorded (cublasGetStream returns the one set) and otherwise ignored,
 * as everywhere in the emulator.  Names are renamed tg_emu_* by macros
 * (see cuda_runtime.h).
 */
#ifndef TG_CUDA_EMU_CUBLAS_V2_H
#define TG_CUDA_EMU_CUBLAS_V2_H

#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14,
} cudaDataType_t;

typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

typedef struct tg_emu_cublas *cublasHandle_t;

#define cublasCreate tg_emu_cublasCreate
#define cublasDestroy tg_emu_cublasDestroy
#define cublasSetStream tg_emu_cublasSetStream
#define cublasGetStream tg_emu_cublasGetStream
#define cublasSgemm tg_emu_cublasSgemm
#define cublasGemmEx tg_emu_cublasGemmEx
#define cublasSgemmStridedBatched tg_emu_cublasSgemmStridedBatched
#define cublasGemmStridedBatchedEx tg_emu_cublasGemmStridedBatchedEx

cublasStatus_t cublasCreate(cublasHandle_t *handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream);
cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k,
                           const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta,
                           float *C, int ldc);
/* batchCount cublasSgemm calls, operand i at A + i strideA, ... */
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long strideA, const float *B, int ldb,
                                         long long strideB, const float *beta, float *C,
                                         int ldc, long long strideC, int batchCount);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A,
                            cudaDataType_t Atype, int lda, const void *B,
                            cudaDataType_t Btype, int ldb, const void *beta,
                            void *C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo);

/* batchCount cublasGemmEx calls, operand i at A + i strideA elements, ... */
cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
    int k, const void *alpha, const void *A, cudaDataType_t Atype, int lda, long long strideA,
    const void *B, cudaDataType_t Btype, int ldb, long long strideB, const void *beta, void *C,
    cudaDataType_t Ctype, int ldc, long long strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo);

/* Calls made so far (the test checks that the 16-bit padding path really
 * reached cublasGemmEx with k rounded up).  Not cuBLAS functions. */
int tg_emu_gemmex_calls(void);
int tg_emu_gemmex_last_k(void);

#ifdef __cplusplus
}
#endif
#endif
