/*
 * taskgrad layer 1: the 16-bit linear layer's GEMMs through cuBLASLt, with
 * the bias, the GELU, its derivative and the bias gradient done in the
 * GEMM's epilogue (issue 51): the outputs are written once, in their
 * 16-bit type, instead of an f32 GEMM result followed by an epilogue
 * kernel (linear_lowp.cu) and a separate bias-gradient reduction.  Plain
 * C, compiled by the host compiler and linked with cuBLASLt.
 *
 * Design note
 * -----------
 * Row-major to column-major as in gemm_cublas.c: a row-major (r, c) matrix
 * with leading dimension ld is a column-major (c, r) one, so
 *   forward   Z (rows, out) = X W^T + b   is   Z^T (out, rows) = W^T' X^T,
 *             cuBLASLt A = W (in, out) transposed, B = X (in, rows), m =
 *             out, n = rows, k = in; the bias, one per row of D, is one per
 *             output feature;
 *   backward  dX (rows, in) = dZ W       is   A = W (in, out), B = dZ
 *             (out, rows), m = in, n = rows, k = out;
 *   weight    dW (out, in) += dZ^T X     is   dW^T (in, out) = X^T dZ: A = X
 *             (in, rows), B = dZ (out, rows) transposed, m = in, n = out,
 *             k = rows; the bias gradient, the sums of op(B) over k (one
 *             per column of D), is CUBLASLT_EPILOGUE_BGRADB.
 * Epilogues (cublasLt.h): BIAS adds b; GELU_AUX_BIAS adds b, stores the
 * pre-activation in the auxiliary matrix (Z, D's type, ld a multiple of 8)
 * and GELU of it in D (H); DGELU multiplies the product by GELU' of the
 * auxiliary input (Zprev).  cuBLASLt's GELU is the tanh approximation,
 * GPT-2's gelu_new and tg_cpu_gelu_fwd's (PyTorch runs
 * gelu(approximate='tanh') on this epilogue; NVIDIA's documentation gives
 * no formula: the op table's cuda case on a GPU is the check).  As in the
 * library, H is GELU of the unrounded pre-activation, which is rounded
 * once into Z.  The bias and the auxiliary matrix have D's type (the only
 * types cuBLASLt allows outside FP8), so the launchers take the outputs,
 * the bias and Zprev in `lowp`; the weight gradient's D and C are the f32
 * dW (beta 1 accumulates, beta 0 overwrites), its bias gradient f32 too,
 * and written, not accumulated: cuBLASLt has no beta for it.
 *
 * Heuristics: cublasLtMatmulAlgoGetHeuristic costs host time (tens of us)
 * on every call, so its first answer is kept per problem: the handle,
 * types, transposes, sizes, leading dimensions, epilogue, the pointers'
 * alignments (which the heuristic reads) and the workspace cap, in a
 * small table under a mutex (StarPU runs one CUDA worker per device, each
 * with its own handle, but a fused task or a second stream may share one).
 * A full table is not an error: further problems ask the heuristic every
 * time.  The workspace is the caller's (the codelets' StarPU scratch),
 * aligned here to 256 bytes and capped at TG_LT_WORKSPACE_MAX.
 *
 * What cuBLASLt cannot do returns CUBLAS_STATUS_NOT_SUPPORTED before any
 * work is queued, so the caller can take the linear_lowp.cu path: ReLU
 * (its epilogue keeps a bit mask, not Z), k == 0, outputs not of the
 * operands' type, an aux leading dimension not a multiple of 8, and any
 * problem the heuristic finds no algorithm for.
 */
#include <pthread.h>
#include <string.h>

#include "taskgrad/kernels_cuda_precision.h"

enum { ACT_RELU = 0, ACT_GELU = 1, ACT_NONE = 2 };

/* one cuBLASLt problem, column-major */
typedef struct lt_problem {
  cublasLtHandle_t handle;
  int32_t ab, cd; /* cudaDataType_t of A and B, of C and D */
  int32_t ta, tb; /* cublasOperation_t */
  uint32_t epilogue;
  uint64_t m, n, k;
  int64_t lda, ldb, ldd, ldaux;
  uint32_t align[5]; /* A, B, D, bias, aux: the largest power of two <= 256 dividing each */
  uint64_t workspace;
} lt_problem;

typedef struct lt_entry {
  lt_problem key;
  cublasLtMatmulAlgo_t algo;
} lt_entry;

#define LT_CACHE_SIZE 256
static lt_entry g_cache[LT_CACHE_SIZE];
static int g_cached;
static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;

static uint32_t alignment(const void *p) {
  uint32_t a = 256;
  while (a > 1 && (uintptr_t)p % a) a /= 2;
  return a;
}

static int lt_cache_find(const lt_problem *key, cublasLtMatmulAlgo_t *algo) {
  int found = 0;
  pthread_mutex_lock(&g_cache_lock);
  for (int i = 0; i < g_cached && !found; i++)
    if (memcmp(&g_cache[i].key, key, sizeof *key) == 0) {
      *algo = g_cache[i].algo;
      found = 1;
    }
  pthread_mutex_unlock(&g_cache_lock);
  return found;
}

static void lt_cache_add(const lt_problem *key, const cublasLtMatmulAlgo_t *algo) {
  pthread_mutex_lock(&g_cache_lock);
  if (g_cached < LT_CACHE_SIZE) {
    g_cache[g_cached].key = *key;
    g_cache[g_cached].algo = *algo;
    g_cached++;
  }
  pthread_mutex_unlock(&g_cache_lock);
}

#define LT_TRY(call)                                                        \
  do {                                                                      \
    st = (call);                                                            \
    if (st != CUBLAS_STATUS_SUCCESS) goto done;                             \
  } while (0)

/* D = epilogue(op(A) op(B) + beta C), C = D; bias and aux as the epilogue
 * needs them (NULL otherwise) */
static cublasStatus_t lt_matmul(lt_problem p, const void *A, const void *B, float beta, void *D,
                                void *bias, void *aux, void *work, size_t work_bytes,
                                cudaStream_t stream) {
  /* the workspace: 256-byte aligned, capped, whole pages */
  uintptr_t w = ((uintptr_t)work + 255) & ~(uintptr_t)255;
  size_t skip = (size_t)(w - (uintptr_t)work);
  size_t bytes = work && work_bytes > skip ? work_bytes - skip : 0;
  if (bytes > TG_LT_WORKSPACE_MAX) bytes = TG_LT_WORKSPACE_MAX;
  bytes &= ~(size_t)4095;
  p.workspace = bytes;
  const void *ptrs[5] = {A, B, D, bias, aux};
  for (int i = 0; i < 5; i++) p.align[i] = ptrs[i] ? alignment(ptrs[i]) : 0;

  cublasLtMatmulDesc_t desc = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasStatus_t st;
  const cudaDataType_t ab = (cudaDataType_t)p.ab, cd = (cudaDataType_t)p.cd;
  LT_TRY(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof p.ta));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof p.tb));
  LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &p.epilogue,
                                        sizeof p.epilogue));
  if (bias) {
    LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                          sizeof bias));
    LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &p.cd,
                                          sizeof p.cd));
  }
  if (aux) {
    LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                          sizeof aux));
    LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &p.ldaux,
                                          sizeof p.ldaux));
  }
  /* A: op(A) is (m, k); B: op(B) is (k, n) */
  LT_TRY(cublasLtMatrixLayoutCreate(&la, ab, p.ta == CUBLAS_OP_N ? p.m : p.k,
                                    p.ta == CUBLAS_OP_N ? p.k : p.m, p.lda));
  LT_TRY(cublasLtMatrixLayoutCreate(&lb, ab, p.tb == CUBLAS_OP_N ? p.k : p.n,
                                    p.tb == CUBLAS_OP_N ? p.n : p.k, p.ldb));
  LT_TRY(cublasLtMatrixLayoutCreate(&ld, cd, p.m, p.n, p.ldd));
  cublasLtMatmulAlgo_t algo;
  if (!lt_cache_find(&p, &algo)) {
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &p.workspace, sizeof p.workspace));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(p.handle, desc, la, lb, ld, ld, pref, 1, &res,
                                          &found));
    if (found < 1 || res.state != CUBLAS_STATUS_SUCCESS) {
      st = CUBLAS_STATUS_NOT_SUPPORTED;
      goto done;
    }
    algo = res.algo;
    lt_cache_add(&p, &algo);
  }
  const float alpha = 1.0f;
  LT_TRY(cublasLtMatmul(p.handle, desc, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &algo,
                        bytes ? (void *)w : NULL, bytes, stream));
done:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (desc) cublasLtMatmulDescDestroy(desc);
  return st;
}

static int lt_type(tg_dtype lowp, int32_t *t) {
  if (lowp != TG_BF16 && lowp != TG_F16) return 0;
  *t = lowp == TG_BF16 ? CUDA_R_16BF : CUDA_R_16F;
  return 1;
}

/* the problem D (m, n) = op(A) op(B), C and D of type cd (-1: A's) */
static lt_problem lt_new(cublasLtHandle_t lt, int32_t ab, int32_t cd, cublasOperation_t ta,
                         cublasOperation_t tb, int m, int n, int k, int lda, int ldb, int ldd) {
  lt_problem p;
  memset(&p, 0, sizeof p); /* the cache compares keys bytewise, padding included */
  p.handle = lt;
  p.ab = ab;
  p.cd = cd < 0 ? ab : cd;
  p.ta = ta;
  p.tb = tb;
  p.m = (uint64_t)m;
  p.n = (uint64_t)n;
  p.k = (uint64_t)k;
  p.lda = lda;
  p.ldb = ldb;
  p.ldd = ldd;
  return p;
}

cublasStatus_t tg_cuda_linear_fwd_lt(cublasLtHandle_t lt, tg_dtype lowp, int rows, int in,
                                     int out, const uint16_t *X, int ldx, const uint16_t *W,
                                     int ldw, const uint16_t *b, int act, uint16_t *Z, int ldz,
                                     uint16_t *H, int ldh, void *work, size_t work_bytes,
                                     cudaStream_t stream) {
  int32_t t;
  if (rows < 0 || in < 0 || out < 0 || !lt_type(lowp, &t)) return CUBLAS_STATUS_INVALID_VALUE;
  if (rows == 0 || out == 0) return CUBLAS_STATUS_SUCCESS;
  const int gelu = act == ACT_GELU;
  if (in == 0 || (act != ACT_NONE && !gelu) || (gelu && (!H || ldz % 8 != 0)))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  lt_problem p = lt_new(lt, t, -1, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, ldw, ldx,
                        gelu ? ldh : ldz);
  if (gelu) { /* D = H, aux = Z */
    p.epilogue = b ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    p.ldaux = ldz;
    return lt_matmul(p, W, X, 0.0f, H, (void *)b, Z, work, work_bytes, stream);
  }
  p.epilogue = b ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  return lt_matmul(p, W, X, 0.0f, Z, (void *)b, NULL, work, work_bytes, stream);
}

cublasStatus_t tg_cuda_linear_bwd_data_lt(cublasLtHandle_t lt, tg_dtype lowp, int rows, int in,
                                          int out, const uint16_t *dZ, int lddz,
                                          const uint16_t *W, int ldw, int act,
                                          const uint16_t *Zprev, int ldzp, uint16_t *dX,
                                          int lddx, void *work, size_t work_bytes,
                                          cudaStream_t stream) {
  int32_t t;
  if (rows < 0 || in < 0 || out < 0 || !lt_type(lowp, &t)) return CUBLAS_STATUS_INVALID_VALUE;
  if (rows == 0 || in == 0) return CUBLAS_STATUS_SUCCESS;
  const int gelu = act == ACT_GELU;
  if (out == 0 || (act != ACT_NONE && !gelu) || (gelu && (!Zprev || ldzp % 8 != 0)))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  lt_problem p =
      lt_new(lt, t, -1, CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out, ldw, lddz, lddx);
  p.epilogue = gelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT;
  p.ldaux = gelu ? ldzp : 0;
  return lt_matmul(p, W, dZ, 0.0f, dX, NULL, gelu ? (void *)Zprev : NULL, work, work_bytes,
                   stream);
}

cublasStatus_t tg_cuda_linear_bwd_weight_lt(cublasLtHandle_t lt, tg_dtype lowp, int rows,
                                            int in, int out, const uint16_t *dZ, int lddz,
                                            const uint16_t *X, int ldx, float beta, float *dW,
                                            int lddw, float *db, void *work, size_t work_bytes,
                                            cudaStream_t stream) {
  int32_t t;
  if (rows < 0 || in < 0 || out < 0 || !lt_type(lowp, &t)) return CUBLAS_STATUS_INVALID_VALUE;
  if (in == 0 || out == 0) return CUBLAS_STATUS_SUCCESS;
  if (rows == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  lt_problem p =
      lt_new(lt, t, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, ldx, lddz, lddw);
  p.epilogue = db ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
  return lt_matmul(p, X, dZ, beta, dW, db, NULL, work, work_bytes, stream);
}
