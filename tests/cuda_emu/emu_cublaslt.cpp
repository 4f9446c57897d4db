/*
 * cuda_emu: the cuBLASLt calls of kernels/cuda on OpenBLAS (test_ops_emu
 * only).  What is kept, computed and refused: include/cublasLt.h.  The
 * product itself is the one of emu_cublas.cpp's cublasGemmEx (16-bit
 * operands widened exactly, cblas_sgemm in f32); the epilogue runs here on
 * the f32 result, and each stored value is rounded once.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cublasLt.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"

struct tg_emu_lt {
  int unused;
};

struct tg_emu_lt_desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t pointer_mode, transa, transb;
  uint32_t epilogue;
  const void *bias;
  void *aux;
  int64_t aux_ld;
  int32_t aux_type, bias_type; /* -1: D's type */
};

struct tg_emu_lt_layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
};

struct tg_emu_lt_pref {
  uint64_t max_workspace;
};

static const uint64_t kAlgoMagic = 0x4c74456d75416c67ULL; /* "LtEmuAlg" */
static const size_t kAlgoWorkspace = 4096;

static int g_matmul_calls, g_heuristic_calls, g_last_epilogue;

extern "C++" {
/* a zeroed object for a Create call */
template <typename T> static cublasStatus_t make(T **p) {
  if (!p) return CUBLAS_STATUS_INVALID_VALUE;
  *p = (T *)calloc(1, sizeof **p);
  return *p ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
template <typename T> static cublasStatus_t set(T *field, const void *buf, size_t size) {
  if (!buf || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  memcpy(field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}
}
extern "C" {

int tg_emu_lt_matmul_calls(void) { return g_matmul_calls; }
int tg_emu_lt_heuristic_calls(void) { return g_heuristic_calls; }
int tg_emu_lt_last_epilogue(void) { return g_last_epilogue; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) { return make(handle); }

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  free(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  cublasStatus_t st = make(desc);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  (*desc)->compute = compute;
  (*desc)->scale = scale;
  (*desc)->transa = CUBLAS_OP_N;
  (*desc)->transb = CUBLAS_OP_N;
  (*desc)->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  (*desc)->aux_type = -1;
  (*desc)->bias_type = -1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  free(desc);
  return CUBLAS_STATUS_SUCCESS;
}

/* buf must hold exactly the attribute's size (cuBLASLt checks it) */


cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
  if (!d) return CUBLAS_STATUS_NOT_INITIALIZED;
  int32_t v32;
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
    if (set(&v32, buf, size)) return CUBLAS_STATUS_INVALID_VALUE;
    d->compute = (cublasComputeType_t)v32;
    return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
    if (set(&v32, buf, size)) return CUBLAS_STATUS_INVALID_VALUE;
    d->scale = (cudaDataType_t)v32;
    return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_DESC_POINTER_MODE: return set(&d->pointer_mode, buf, size);
  case CUBLASLT_MATMUL_DESC_TRANSA: return set(&d->transa, buf, size);
  case CUBLASLT_MATMUL_DESC_TRANSB: return set(&d->transb, buf, size);
  case CUBLASLT_MATMUL_DESC_EPILOGUE: return set(&d->epilogue, buf, size);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set(&d->bias, buf, size);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set(&d->aux, buf, size);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set(&d->aux_ld, buf, size);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return set(&d->aux_type, buf, size);
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return set(&d->bias_type, buf, size);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType_t type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  cublasStatus_t st = make(layout);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  **layout = tg_emu_lt_layout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  free(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  return make(pref);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  free(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size) {
  if (!pref) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (attr != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return CUBLAS_STATUS_INVALID_VALUE;
  return set(&pref->max_workspace, buf, size);
}

static int is16(cudaDataType_t t) { return t == CUDA_R_16BF || t == CUDA_R_16F; }
static size_t esize(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

static int has_bias(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}
static int has_aux(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU;
}

/* The checks cuBLASLt documents, for the heuristic and the matmul alike
 * (the pointers of the bias and aux are set on the descriptor before the
 * heuristic, which reads their alignment). */
static cublasStatus_t check(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                            cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                            cublasLtMatrixLayout_t D) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!d || !A || !B || !C || !D) return CUBLAS_STATUS_INVALID_VALUE;
  if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (d->pointer_mode != 0) return CUBLAS_STATUS_NOT_SUPPORTED; /* host scalars only here */
  if (A->type != B->type || !is16(A->type) || C->type != D->type ||
      (D->type != A->type && D->type != CUDA_R_32F))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if ((d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T) ||
      (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T))
    return CUBLAS_STATUS_INVALID_VALUE;
  const uint64_t m = D->rows, n = D->cols;
  const uint64_t am = d->transa == CUBLAS_OP_N ? A->rows : A->cols;
  const uint64_t k = d->transa == CUBLAS_OP_N ? A->cols : A->rows;
  const uint64_t bk = d->transb == CUBLAS_OP_N ? B->rows : B->cols;
  const uint64_t bn = d->transb == CUBLAS_OP_N ? B->cols : B->rows;
  if (am != m || bn != n || bk != k || C->rows != m || C->cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  const cublasLtMatrixLayout_t all[4] = {A, B, C, D};
  for (int i = 0; i < 4; i++)
    if (all[i]->ld < (int64_t)(all[i]->rows ? all[i]->rows : 1))
      return CUBLAS_STATUS_INVALID_VALUE;
  const uint32_t e = d->epilogue;
  if (e != CUBLASLT_EPILOGUE_DEFAULT && !has_bias(e) && !has_aux(e))
    return CUBLAS_STATUS_NOT_SUPPORTED; /* not emulated */
  if (has_bias(e)) {
    if (!d->bias) return CUBLAS_STATUS_INVALID_VALUE;
    if (d->bias_type != -1 && d->bias_type != (int32_t)D->type) return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (has_aux(e)) {
    if (!d->aux || d->aux_ld % 8 != 0 || d->aux_ld < (int64_t)m) return CUBLAS_STATUS_INVALID_VALUE;
    if (d->aux_type != -1 && d->aux_type != (int32_t)D->type) return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
    cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int *returned) {
  if (requested <= 0 || !results || !returned || !pref) return CUBLAS_STATUS_INVALID_VALUE;
  cublasStatus_t st = check(h, d, A, B, C, D);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  g_heuristic_calls++;
  memset(&results[0], 0, sizeof results[0]);
  results[0].algo.data[0] = kAlgoMagic;
  results[0].workspaceSize =
      pref->max_workspace < kAlgoWorkspace ? (size_t)pref->max_workspace : kAlgoWorkspace;
  results[0].algo.data[1] = results[0].workspaceSize;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

static float load(cudaDataType_t t, const void *p, size_t i) {
  if (t == CUDA_R_32F) return ((const float *)p)[i];
  const uint16_t h = ((const uint16_t *)p)[i];
  return t == CUDA_R_16BF ? __bfloat162float(__ushort_as_bfloat16(h))
                          : __half2float(__ushort_as_half(h));
}

static void store(cudaDataType_t t, void *p, size_t i, float x) {
  if (t == CUDA_R_32F)
    ((float *)p)[i] = x;
  else
    ((uint16_t *)p)[i] = t == CUDA_R_16BF ? __bfloat16_as_ushort(__float2bfloat16_rn(x))
                                          : __half_as_ushort(__float2half_rn(x));
}

/* (rows, cols) column-major matrix of layout L at p -> compact f32 */
static float *widen(cublasLtMatrixLayout_t L, const void *p) {
  const size_t r = L->rows, c = L->cols;
  float *w = (float *)malloc(sizeof(float) * (r ? r : 1) * (c ? c : 1));
  if (!w) return NULL;
  for (size_t j = 0; j < c; j++)
    for (size_t i = 0; i < r; i++) w[j * r + i] = load(L->type, p, j * (size_t)L->ld + i);
  return w;
}

/* the tanh approximation (GPT-2's gelu_new) and its derivative */
static const float kK0 = 0.7978845608028654f, kK1 = 0.044715f;
static float gelu(float z) { return 0.5f * z * (1.0f + tanhf(kK0 * (z + kK1 * z * z * z))); }
static float gelu_grad(float z) {
  const float t = tanhf(kK0 * (z + kK1 * z * z * z));
  return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kK0 * (1.0f + 3.0f * kK1 * z * z);
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Ad, const void *B,
                              cublasLtMatrixLayout_t Bd, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cd, void *D, cublasLtMatrixLayout_t Dd,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  (void)stream;
  cublasStatus_t st = check(h, d, Ad, Bd, Cd, Dd);
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (algo) {
    if (algo->data[0] != kAlgoMagic) return CUBLAS_STATUS_INVALID_VALUE;
    if (algo->data[1] > workspace_bytes || (algo->data[1] && !workspace))
      return CUBLAS_STATUS_INVALID_VALUE;
    if (algo->data[1]) memset(workspace, 0xff, algo->data[1]); /* the algorithm's scratch */
  }
  const uint64_t m = Dd->rows, n = Dd->cols;
  const uint64_t k = d->transa == CUBLAS_OP_N ? Ad->cols : Ad->rows;
  const uintptr_t ptrs[3] = {(uintptr_t)A, (uintptr_t)B, (uintptr_t)D};
  const cudaDataType_t types[3] = {Ad->type, Bd->type, Dd->type};
  for (int i = 0; i < 3; i++)
    if (ptrs[i] % esize(types[i])) return CUBLAS_STATUS_INVALID_VALUE;
  g_matmul_calls++;
  g_last_epilogue = (int)d->epilogue;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const float a = *(const float *)alpha, b = *(const float *)beta;
  float *Aw = widen(Ad, A), *Bw = widen(Bd, B);
  float *T = (float *)malloc(sizeof(float) * m * n);
  if (!Aw || !Bw || !T) {
    free(Aw);
    free(Bw);
    free(T);
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  for (uint64_t j = 0; j < n; j++) /* C read as f32; beta == 0 reads nothing */
    for (uint64_t i = 0; i < m; i++)
      T[j * m + i] = b == 0.0f ? 0.0f : load(Cd->type, C, j * (size_t)Cd->ld + i);
  if (k > 0)
    cblas_sgemm(CblasColMajor, d->transa == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                d->transb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, (int)m, (int)n, (int)k, a,
                Aw, (int)(Ad->rows ? Ad->rows : 1), Bw, (int)(Bd->rows ? Bd->rows : 1), b, T,
                (int)m);
  else
    for (uint64_t i = 0; i < m * n; i++) T[i] *= b;
  const uint32_t e = d->epilogue;
  const cudaDataType_t dt = Dd->type;
  if (e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB) {
    /* sums of op(A) (m, k) over k, or of op(B) (k, n) over k; the widened
     * operands are compact: A (Ad->rows, Ad->cols), B likewise */
    const int on_a = e == CUBLASLT_EPILOGUE_BGRADA;
    const float *X = on_a ? Aw : Bw;
    const cublasLtMatrixLayout_t L = on_a ? Ad : Bd;
    const int trans = on_a ? d->transa != CUBLAS_OP_N : d->transb != CUBLAS_OP_N;
    const uint64_t len = on_a ? m : n;
    for (uint64_t i = 0; i < len; i++) {
      double s = 0;
      for (uint64_t p = 0; p < k; p++) {
        /* op(A)(i, p) or op(B)(p, i) in the stored (L->rows, L->cols) */
        uint64_t r, c;
        if (on_a) {
          r = trans ? p : i;
          c = trans ? i : p;
        } else {
          r = trans ? i : p;
          c = trans ? p : i;
        }
        s += X[c * L->rows + r];
      }
      store(dt, (void *)d->bias, i, (float)s);
    }
  }
  for (uint64_t j = 0; j < n; j++)
    for (uint64_t i = 0; i < m; i++) {
      float z = T[j * m + i];
      if (e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
        z += load(dt, d->bias, i);
      if (e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        store(dt, d->aux, j * (size_t)d->aux_ld + i, z);
        z = gelu(z);
      } else if (e == CUBLASLT_EPILOGUE_DGELU) {
        z *= gelu_grad(load(dt, d->aux, j * (size_t)d->aux_ld + i));
      }
      store(dt, D, j * (size_t)Dd->ld + i, z);
    }
  free(Aw);
  free(Bw);
  free(T);
  return CUBLAS_STATUS_SUCCESS;
}

} /* extern "C" */
