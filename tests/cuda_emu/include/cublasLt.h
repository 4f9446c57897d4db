/*
 * cuda_emu: stand-in for <cublasLt.h> (test_ops_emu only): the cuBLASLt
 * calls of kernels/cuda (gemm_lt.c), run on OpenBLAS by emu_cublaslt.cpp.
 *
 * Design note
 * -----------
 * The descriptors keep what the calls set: the compute and scale types,
 * TRANSA / TRANSB, the epilogue, the bias pointer and type, the auxiliary
 * pointer, leading dimension and type (matmul descriptor); type, rows,
 * cols and ld (matrix layouts); the workspace cap (preference).
 * cublasLtMatmul then checks them the way cuBLASLt documents (cublasLt.h's
 * comments) and computes, column-major like the library:
 *   T = alpha op(A) op(B) + beta C         (16-bit A, B widened exactly,
 *                                           f32 sums, C read as f32)
 *   DEFAULT        D = T
 *   BIAS           D = T + bias[i]          (bias: one per row of D)
 *   GELU_AUX(_BIAS) z = T (+ bias[i]); aux = z; D = gelu(z)
 *   DGELU          D = T * gelu'(aux)
 *   BGRADA / BGRADB D = T; bias = sums of op(A) over k (rows of D) / of
 *                  op(B) over k (columns of D), written, not accumulated
 * each stored value rounded once to its type (D, aux: D's type; bias: D's).
 * GELU is the tanh approximation, 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715
 * z^3))), as cuBLASLt's epilogue (PyTorch's fused addmm + GELU uses that
 * epilogue for gelu(approximate='tanh')); the derivative is that formula's.
 * Refused, as the library refuses them: a compute or scale type other than
 * 32F, A and B not one 16-bit type, C and D of different types or of a
 * type other than A's or f32 (NOT_SUPPORTED); shapes that do not chain,
 * ld < rows, a missing bias or aux pointer, an aux ld not a multiple of 8
 * or below D's rows, a bias or aux type other than D's, a workspace
 * smaller than the algorithm's (INVALID_VALUE).  Epilogues the emulator
 * does not compute (ReLU's bit masks, DGELU_BGRAD, ...) are NOT_SUPPORTED.
 * The emulated heuristic returns one algorithm that asks for up to 4 KiB
 * of workspace (no more than the preference allows), which cublasLtMatmul
 * overwrites, so that a workspace smaller than promised shows under ASan.
 * Names are renamed tg_emu_* by macros (see cuda_runtime.h).
 */
#ifndef TG_CUDA_EMU_CUBLASLT_H
#define TG_CUDA_EMU_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include "cublas_v2.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tg_emu_lt *cublasLtHandle_t;
typedef struct tg_emu_lt_desc *cublasLtMatmulDesc_t;
typedef struct tg_emu_lt_layout *cublasLtMatrixLayout_t;
typedef struct tg_emu_lt_pref *cublasLtMatmulPreference_t;

typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

/* the values are cublasLt.h's */
typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;

typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_RELU_AUX = 2 | 128,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_RELU_BIAS = 2 | 4,
  CUBLASLT_EPILOGUE_RELU_AUX_BIAS = 2 | 128 | 4,
  CUBLASLT_EPILOGUE_DRELU = 8 | 128,
  CUBLASLT_EPILOGUE_DRELU_BGRAD = 8 | 128 | 16,
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
  CUBLASLT_EPILOGUE_GELU_BIAS = 32 | 4,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
  CUBLASLT_EPILOGUE_DGELU_BGRAD = 64 | 128 | 16,
  CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512,
} cublasLtEpilogue_t;

typedef enum { CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1 } cublasLtMatmulPreferenceAttributes_t;

#define cublasLtCreate tg_emu_cublasLtCreate
#define cublasLtDestroy tg_emu_cublasLtDestroy
#define cublasLtMatmulDescCreate tg_emu_cublasLtMatmulDescCreate
#define cublasLtMatmulDescDestroy tg_emu_cublasLtMatmulDescDestroy
#define cublasLtMatmulDescSetAttribute tg_emu_cublasLtMatmulDescSetAttribute
#define cublasLtMatrixLayoutCreate tg_emu_cublasLtMatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy tg_emu_cublasLtMatrixLayoutDestroy
#define cublasLtMatmulPreferenceCreate tg_emu_cublasLtMatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy tg_emu_cublasLtMatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute tg_emu_cublasLtMatmulPreferenceSetAttribute
#define cublasLtMatmulAlgoGetHeuristic tg_emu_cublasLtMatmulAlgoGetHeuristic
#define cublasLtMatmul tg_emu_cublasLtMatmul

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int *returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspace_bytes, cudaStream_t stream);

/* Calls made so far and the last epilogue run (the tests check that a
 * launcher went through cuBLASLt, and that its heuristic cache holds).  Not
 * cuBLASLt functions. */
int tg_emu_lt_matmul_calls(void);
int tg_emu_lt_heuristic_calls(void);
int tg_emu_lt_last_epilogue(void);

#ifdef __cplusplus
}
#endif
#endif
