/*
 * taskgrad layer 1: causal multi-head attention with its five products on
 * cuBLAS (tensor cores), the device twin of tg_cpu_attention_chunked_* with
 * the chunked kernels' contract (layout, lse, dqkv written; read
 * attention.cu's note).
 *
 * Design note
 * -----------
 * The flash kernels of attention.cu run on FP32 CUDA cores, at a few TFLOP/s
 * on an H100, and were most of the measured GPT step
 * (bench/results/2026-11-26-h100-measured.md).  This path is llm.c's cuBLAS
 * attention instead: per sequence, every head at once through
 * cublasSgemmStridedBatched (batch NH, head h at column h*hs of the qkv
 * rows, stride hs), the (NH, T, T) scores and probabilities materialised in
 * the scratch:
 *   forward:  A = scale Q K^T;  softmax per row over keys t2 <= t, A = P
 *             (0 above the diagonal), lse = m + log l;  out = A V.
 *   backward: D = rowsum(dout * out) (attention_rowdot.h, (n, NH));
 *             A = scale Q K^T, B = dout V^T;  one pass: A = P = exp(A - lse),
 *             B = dS = P (B - D) (both 0 above the diagonal);
 *             dV = A^T dout, dQ = scale B K, dK = scale B^T Q.
 * Scratch: D (b T NH) | A (NH T T) | B (NH T T) floats, reused by every
 * sequence; tg_attn_gemm_scratch_floats (scratch_sizes.h).  The full T x T products do twice
 * the causal work (the zeros above the diagonal), and the memory is O(T^2):
 * the codelet takes this path while the scratch is within
 * TG_ATTN_GEMM_MAX_FLOATS and the flash kernels beyond.
 * Precision: the products sum in f32; with the handle in TF32 math (bf16
 * and fp16 runs, precision.md) the f32 operands P and dS are read as TF32
 * (Q, K, V and dout hold 16-bit values then, exact in TF32).  Deterministic
 * (cuBLAS's products and these kernels have no atomics).  The handle must
 * be bound to `stream` (cudaErrorInvalidValue otherwise); a cuBLAS failure
 * is cudaErrorUnknown.  Never allocates or synchronises.
 */
#include "taskgrad/kernels_cuda.h"
#include "attention_gemm.cuh"
#include "attention_rowdot.h"
#include "cuda_common.cuh"

namespace {

using tg_attn_gemm::softmax_rows; /* unqualified: the emulator's launch rewrite */

/* P in place of the scores */
struct StoreP {
  float *A;
  __device__ void operator()(size_t i, float p) const { A[i] = p; }
};

/* P and dS in place of A and B (the pass reads each element before it
 * writes it) */
struct StoreInPlace {
  float *A, *B;
  __device__ void operator()(size_t i, float p, float ds) const {
    A[i] = p;
    B[i] = ds;
  }
};

/* dst (T, T) per head, batch NH = alpha x(T, hs) y(T, hs)^T, heads at stride hs */
cublasStatus_t scores(cublasHandle_t handle, int T, int hs, int NH, float alpha,
                      const float *x, int ldx, const float *y, int ldy, float *dst) {
  return tg_cuda_gemm_strided(handle, 0, 1, T, T, hs, alpha, x, ldx, hs, y, ldy, hs, 0.0f,
                              dst, T, (long long)T * T, NH);
}

/* dst (T, hs) per head = alpha op(M) (T, T) y (T, hs) */
cublasStatus_t weighted(cublasHandle_t handle, int transm, int T, int hs, int NH,
                        float alpha, const float *M, const float *y, int ldy, float *dst,
                        int ldd) {
  return tg_cuda_gemm_strided(handle, transm, 0, T, hs, T, alpha, M, T, (long long)T * T, y,
                              ldy, hs, 0.0f, dst, ldd, hs, NH);
}

} // namespace

extern "C" cudaError_t tg_cuda_attention_gemm_fwd(cublasHandle_t handle, int b, int T, int C,
                                                  int NH, const float *qkv, int ldqkv,
                                                  float *out, int ldo, float *lse,
                                                  float *scratch, cudaStream_t stream) {
  const int chk = tg_attn_gemm::check(handle, b, T, C, NH, stream);
  if (chk) return chk > 0 ? cudaSuccess : cudaErrorInvalidValue;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  float *A = scratch + (size_t)b * T * NH; /* (NH, T, T) */
  const size_t rows = (size_t)NH * T;
  for (int s = 0; s < b; s++) {
    const float *q = qkv + (size_t)s * T * ldqkv; /* (T, ldqkv): q | k | v */
    if (scores(handle, T, hs, NH, scale, q, ldqkv, q + C, ldqkv, A) != CUBLAS_STATUS_SUCCESS)
      return cudaErrorUnknown;
    softmax_rows<StoreP><<<tg_cuda_blocks((rows + 7) / 8, 1), 256, 0, stream>>>(
        NH, T, A, StoreP{A}, lse + (size_t)s * T * NH);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    if (weighted(handle, 0, T, hs, NH, 1.0f, A, q + 2 * C, ldqkv, out + (size_t)s * T * ldo,
                 ldo) != CUBLAS_STATUS_SUCCESS)
      return cudaErrorUnknown;
  }
  return cudaSuccess;
}

extern "C" cudaError_t tg_cuda_attention_gemm_bwd(cublasHandle_t handle, int b, int T, int C,
                                                  int NH, const float *qkv, int ldqkv,
                                                  const float *out, int ldo, const float *lse,
                                                  const float *dout, int lddo, float *dqkv,
                                                  int lddqkv, float *scratch,
                                                  cudaStream_t stream) {
  const int chk = tg_attn_gemm::check(handle, b, T, C, NH, stream);
  if (chk) return chk > 0 ? cudaSuccess : cudaErrorInvalidValue;
  const int hs = C / NH;
  const float scale = 1.0f / sqrtf((float)hs);
  float *D = scratch;                        /* (b T, NH) */
  float *A = D + (size_t)b * T * NH;         /* (NH, T, T): scores, then P */
  float *B = A + (size_t)NH * T * T;         /* (NH, T, T): dP, then dS */
  cudaError_t e = tg_cuda_attention_rowdot((size_t)b * T * NH, NH, hs, out, ldo, dout, lddo,
                                           D, stream);
  if (e != cudaSuccess) return e;
  for (int s = 0; s < b; s++) {
    const float *q = qkv + (size_t)s * T * ldqkv, *k = q + C, *v = q + 2 * C;
    const float *dO = dout + (size_t)s * T * lddo;
    float *dq = dqkv + (size_t)s * T * lddqkv, *dk = dq + C, *dv = dq + 2 * C;
    if (scores(handle, T, hs, NH, scale, q, ldqkv, k, ldqkv, A) != CUBLAS_STATUS_SUCCESS ||
        scores(handle, T, hs, NH, 1.0f, dO, lddo, v, ldqkv, B) != CUBLAS_STATUS_SUCCESS)
      return cudaErrorUnknown;
    e = tg_map2d(NH * T, T,
                 tg_attn_gemm::SoftmaxBwd<StoreInPlace>{A, B, lse + (size_t)s * T * NH,
                                                        D + (size_t)s * T * NH, NH, T,
                                                        StoreInPlace{A, B}},
                 stream);
    if (e != cudaSuccess) return e;
    if (weighted(handle, 1, T, hs, NH, 1.0f, A, dO, lddo, dv, lddqkv) !=
            CUBLAS_STATUS_SUCCESS ||
        weighted(handle, 0, T, hs, NH, scale, B, k, ldqkv, dq, lddqkv) !=
            CUBLAS_STATUS_SUCCESS ||
        weighted(handle, 1, T, hs, NH, scale, B, q, ldqkv, dk, lddqkv) != CUBLAS_STATUS_SUCCESS)
      return cudaErrorUnknown;
  }
  return cudaSuccess;
}
